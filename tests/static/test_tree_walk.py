"""The fast walker visits what libcst's own traversal visits, in the same order,
and the rules find the same things with either."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper

from attncheck.sources import Source
from attncheck.static.engine import lint
from attncheck.static.rules import all_rules
from attncheck.static.tree import cst_fields, fast_tree, node_fields, walk

ROOT = Path(__file__).resolve().parents[2]
# The fixtures, and a large file with most of Python's syntax.
FILES = [*sorted((ROOT / "fixtures").rglob("*.py")), ROOT / "attncheck" / "static" / "analysis" / "patterns.py"]


@cache
def modules() -> tuple[cst.Module, ...]:
    return tuple(cst.parse_module(path.read_text(encoding="utf-8")) for path in FILES)


def test_the_field_table_matches_the_installed_libcst():
    assert node_fields.libcst_version == cst_fields.LIBCST_VERSION
    assert {cls.__name__: node_fields.derive_fields(cls) for cls in node_fields.node_classes()} == cst_fields.FIELDS


def test_children_are_libcsts_children_for_every_node():
    checked = 0
    stack: list[cst.CSTNode] = list(modules())
    while stack:
        node = stack.pop()
        expected = list(node.children)
        found = node_fields.children(node)
        assert len(found) == len(expected), type(node).__name__
        assert all(a is b for a, b in zip(found, expected, strict=True)), type(node).__name__
        stack.extend(expected)
        checked += 1
    assert checked > 10_000


class Recorder(cst.CSTVisitor):
    """Every visit and leave, by node identity; skips the children of calls when asked."""

    def __init__(self, prune_calls: bool = False) -> None:
        super().__init__()
        self.events: list[tuple[str, int]] = []
        self.prune_calls = prune_calls

    def visit_Call(self, node: cst.Call) -> bool:
        self.events.append(("visit", id(node)))
        return not self.prune_calls

    def leave_Call(self, original_node: cst.Call) -> None:
        self.events.append(("leave", id(original_node)))

    def visit_Name(self, node: cst.Name) -> None:
        self.events.append(("name", id(node)))

    def visit_Comment(self, node: cst.Comment) -> None:
        self.events.append(("comment", id(node)))


class EveryNode(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, int]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.events.append(("visit", id(node)))
        return not isinstance(node, cst.Lambda)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.events.append(("leave", id(original_node)))


@pytest.mark.parametrize("make", [Recorder, lambda: Recorder(prune_calls=True), EveryNode])
def test_visit_calls_what_libcst_calls_in_the_same_order(make):
    for module in modules():
        ours, theirs = make(), make()
        walk.visit(module, ours)
        module.visit(theirs)
        assert ours.events == theirs.events


def test_skipping_trivia_keeps_the_order_of_everything_else():
    for module in modules():
        ours, theirs = EveryNode(), EveryNode()
        walk.visit(module, ours, trivia=False)
        module.visit(theirs)
        kept = {node_id for _, node_id in ours.events}
        assert len(kept) < len({node_id for _, node_id in theirs.events})
        assert ours.events == [event for event in theirs.events if event[1] in kept]


class EventRecorder(cst.CSTVisitor):
    """Visits and leaves of every class a fast module lists as events; prunes lambdas and,
    when asked, classes (the walk must resume past their subtrees, and still leave them)."""

    def __init__(self, prune_classes: bool = False) -> None:
        super().__init__()
        self.events: list[tuple[str, int]] = []
        self.prune_classes = prune_classes

    def on_visit(self, node: cst.CSTNode) -> bool:  # not used by walk: the visit_* below are
        raise AssertionError("a replay or batched walk never calls on_visit")

    def record(self, kind: str, node: cst.CSTNode) -> None:
        self.events.append((kind, id(node)))


def _recording(name: str):
    def visit(self, node):
        self.record("visit", node)
        return not (name == "Lambda" or (name == "ClassDef" and self.prune_classes))

    def leave(self, original_node):
        self.record("leave", original_node)
    return visit, leave


for _cls in fast_tree.FastModule.EVENT_CLASSES:
    _visit, _leave = _recording(_cls.__name__)
    setattr(EventRecorder, f"visit_{_cls.__name__}", _visit)
    setattr(EventRecorder, f"leave_{_cls.__name__}", _leave)
del EventRecorder.on_visit


@pytest.mark.parametrize("prune_classes", [False, True])
def test_a_replay_of_the_fast_trees_events_is_the_walk_of_it(prune_classes, monkeypatch):
    compared = 0
    for path in FILES:
        module = fast_tree.build(path.read_text(encoding="utf-8"))
        replayed, walked = EventRecorder(prune_classes), EventRecorder(prune_classes)
        walk.visit(module, replayed)
        monkeypatch.setattr(walk._Walker, "replay", lambda self, events: pytest.fail("replayed"))
        monkeypatch.setattr(type(module), "EVENT_CLASSES", frozenset())  # no replay: a walk of the tree
        walk.visit(module, walked)
        monkeypatch.undo()
        assert replayed.events == walked.events, path.name
        compared += len(replayed.events)
    assert compared > 2_000


def libcst_visit_batched(module, visitors, metadata) -> None:
    MetadataWrapper(module, unsafe_skip_copy=True).visit_batched(list(visitors))


def refuse_fast_tree(text: str):
    raise fast_tree.NotModelledError("libcst's own tree for this comparison")


def test_rules_find_the_same_with_libcsts_traversal(monkeypatch):
    """The buggy and seed fixtures, linted with the fast walker and with libcst's own traversal."""
    paths = sorted((ROOT / "fixtures" / "buggy").rglob("*.py")) + sorted((ROOT / "fixtures" / "seeds").rglob("*.py"))
    sources = [Source(str(path), path.read_text(encoding="utf-8")) for path in paths]
    fast = [lint(source, all_rules()) for source in sources]
    monkeypatch.setattr(walk, "visit", lambda node, visitor, trivia=True: node.visit(visitor))
    monkeypatch.setattr(node_fields, "children", lambda node: list(node.children))
    monkeypatch.setattr(walk, "visit_batched", libcst_visit_batched)
    monkeypatch.setattr(fast_tree, "build", refuse_fast_tree)  # libcst's traversal rebuilds nodes: its own tree
    slow = [lint(source, all_rules()) for source in sources]
    assert sum(len(result.findings) for result in fast) > 50
    for a, b in zip(fast, slow, strict=True):
        assert (a.findings, a.targets, a.error) == (b.findings, b.targets, b.error), a.source.path
