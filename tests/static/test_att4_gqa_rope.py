"""ATT401-ATT404 (GQA grouping and RoPE) on their fixtures, on generated variants, and
the RoPE recognition helpers they share."""

from __future__ import annotations

import re
from pathlib import Path

import libcst as cst
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attncheck.findings import Severity
from attncheck.static.analysis import rope as rp
from attncheck.static.facts import FileFacts
from attncheck.static.rules.att4_gqa_rope.gqa_grouping import GqaGrouping
from attncheck.static.rules.att4_gqa_rope.rope_on_value import RopeOnValue
from attncheck.static.rules.att4_gqa_rope.rope_rotation import RopeRotation
from attncheck.static.rules.att4_gqa_rope.rope_shape import RopeShape
from attncheck.static.tree import fast_tree, subtree
from tests.conftest import lint_text

RULES = (GqaGrouping, RopeRotation, RopeShape, RopeOnValue)
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
_EXPECT = re.compile(r"#\s*expect:\s*(ATT\d+(?:\s*,\s*ATT\d+)*)")
_OWN = ("ATT401", "ATT402", "ATT403", "ATT404")


def _fixtures(folder: str) -> list[Path]:
    return sorted(p for pattern in ("gqa_*.py", "rope_*.py") for p in (FIXTURES / folder).glob(pattern))


def _expected(text: str) -> set[tuple[int, str]]:
    found = set()
    for number, line in enumerate(text.splitlines(), start=1):
        match = _EXPECT.search(line)
        if match:
            found |= {(number, code.strip()) for code in match.group(1).split(",")}
    return found


def _flagged(text: str, path: Path) -> set[tuple[int, str]]:
    findings = lint_text(text, RULES, path=str(path))
    return {(f.line, f.code) for f in findings if f.severity >= Severity.WARNING}


@pytest.mark.parametrize(
    "path", _fixtures("buggy") + _fixtures("correct"), ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_fixture_gets_exactly_its_marked_findings(path):
    # Only this family's codes: the other families' rules judge these files in their own tests.
    text = path.read_text(encoding="utf-8")
    expected = {(line, code) for line, code in _expected(text) if code in _OWN}
    assert _flagged(text, path) == expected
    if path.parent.name == "buggy":
        assert expected, "a buggy fixture must mark at least one line"
        assert re.search(r"^# dynamic: ", text, re.MULTILINE), "a buggy fixture needs a # dynamic: header"


def test_seed_004_rope_class_is_flagged_on_both_slicing_lines():
    path = FIXTURES / "buggy" / "rope_seed004_slice.py"
    text = path.read_text(encoding="utf-8")
    lines = {line for line, code in _flagged(text, path) if code == "ATT403"}
    assert {text.splitlines()[n - 1].strip().split(" =")[0] for n in lines} == {"cos", "sin"}


def _severities(path: Path) -> set[Severity]:
    return {f.severity for f in lint_text(path.read_text(encoding="utf-8"), [GqaGrouping], path=str(path))}


def test_tiling_alone_is_a_warning_and_mixed_with_repeat_kv_an_error():
    assert _severities(FIXTURES / "buggy" / "gqa_tiled.py") == {Severity.WARNING}
    assert _severities(FIXTURES / "buggy" / "gqa_mixed.py") == {Severity.ERROR}


def test_tiling_in_a_file_that_loads_a_checkpoint_is_an_error():
    text = (FIXTURES / "buggy" / "gqa_tiled.py").read_text(encoding="utf-8")
    text += "\n\ndef load(path):\n    model = TiledGQA(64, 8, 2)\n"
    text += "    model.load_state_dict(torch.load(path))\n"
    assert {f.severity for f in lint_text(text, [GqaGrouping])} == {Severity.ERROR}


# -- property: .repeat on the head axis is flagged, repeat_interleave never -------------------

_KV_NAMES = st.sampled_from(["k", "v", "key_states", "value_states", "xk", "keys"])
_GROUP_SPELLINGS = st.sampled_from([
    ("self.num_groups", "self.num_groups = num_heads // num_kv_heads"),
    ("self.n_rep", "self.n_rep = num_heads // num_kv_heads"),
    ("self.num_key_value_groups", "self.num_key_value_groups = num_heads // num_kv_heads"),
    ("self.num_heads // self.num_kv_heads", "pass"),
])


def _gqa_module(kv: str, group: str, setup: str, expansion: str, heads: int, kv_heads: int) -> str:
    return (
        "import torch.nn as nn\n\n"
        "class Attn(nn.Module):\n"
        f"    def __init__(self, d_model={heads * 8}, num_heads={heads}, num_kv_heads={kv_heads}):\n"
        "        super().__init__()\n"
        "        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads\n"
        f"        {setup}\n\n"
        f"    def forward(self, q, {kv}):\n"
        f"        {kv} = {expansion.format(kv=kv, group=group)}\n"
        f"        return q @ {kv}.transpose(-2, -1)\n"
    )


@settings(max_examples=25, deadline=None)
@given(
    kv=_KV_NAMES,
    group=_GROUP_SPELLINGS,
    kv_heads=st.integers(1, 8),
    ratio=st.integers(2, 8),
    tiled=st.sampled_from(["{kv}.repeat(1, {group}, 1, 1)", "{kv}.repeat((1, {group}, 1, 1))",
                           "torch.tile({kv}, (1, {group}, 1, 1))", "{kv}.tile(1, {group}, 1, 1)",
                           "{kv}.unsqueeze(1).repeat(1, {group}, 1, 1, 1).flatten(1, 2)"]),
    grouped=st.sampled_from(["{kv}.repeat_interleave({group}, dim=1)",
                             "torch.repeat_interleave({kv}, {group}, dim=1)",
                             "{kv}[:, :, None].expand(-1, self.num_kv_heads, {group}, -1, -1).flatten(1, 2)",
                             "{kv}.unsqueeze(2).repeat(1, 1, {group}, 1, 1).flatten(1, 2)"]),
)
def test_repeat_on_the_head_axis_is_flagged_and_repeat_interleave_never(
    kv, group, kv_heads, ratio, tiled, grouped
):
    name, setup = group
    bad = _gqa_module(kv, name, setup, tiled, kv_heads * ratio, kv_heads)
    good = _gqa_module(kv, name, setup, grouped, kv_heads * ratio, kv_heads)
    assert [f.line for f in lint_text(bad, [GqaGrouping])] == [10]
    assert lint_text(good, [GqaGrouping]) == []


# -- the recognition helpers ----------------------------------------------------------------


def _index(source: str) -> rp.RopeIndex:
    return rp.build_rope_index(FileFacts(cst.parse_module(source)))


@pytest.mark.parametrize(
    ("body", "layout", "sign"),
    [
        ("x1, x2 = x.chunk(2, dim=-1)\n    return torch.cat((-x2, x1), dim=-1)", rp.HALF, 1),
        ("x1, x2 = torch.chunk(x, 2, dim=-1)\n    return torch.cat([x2, -x1], -1)", rp.HALF, -1),
        ("h = x.shape[-1] // 2\n    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)", rp.HALF, 1),
        ("x1, x2 = x[..., ::2], x[..., 1::2]\n    return torch.stack((-x2, x1), -1).flatten(-2)", rp.PAIR, 1),
        ("x1 = x[..., 0::2]\n    x2 = x[..., 1::2]\n    return torch.stack([x2, -x1], -1).flatten(-2)",
         rp.PAIR, -1),
    ],
)
def test_rotations_are_recognised_with_layout_and_sign(body, layout, sign):
    found = _index(f"import torch\n\ndef rot(x):\n    {body}\n").rotations["rot"]
    assert (found.layout, found.sign) == (layout, sign)


@pytest.mark.parametrize(
    "body",
    [
        "return torch.cat((x[..., 1:], x[..., :1]), dim=-1)",  # a roll, no negation
        "x1, x2 = x.chunk(2, dim=-1)\n    return torch.cat((-x1, x2), dim=-1)",  # not a swap
        "x1, x2 = x.chunk(2, dim=-1)\n    return torch.stack((-x2, x1), dim=-1)",  # halves stacked: no layout
    ],
)
def test_non_rotations_are_not_recognised(body):
    assert _index(f"import torch\n\ndef rot(x):\n    {body}\n").rotations == {}


@pytest.mark.parametrize(
    ("expression", "layout"),
    [
        ("torch.cat((freqs, freqs), dim=-1)", rp.HALF),
        ("torch.cat([freqs, freqs], -1)", rp.HALF),
        ("freqs.repeat_interleave(2, dim=-1)", rp.PAIR),
        ("torch.repeat_interleave(freqs, 2, dim=-1)", rp.PAIR),
        ("torch.stack((freqs, freqs), dim=-1).flatten(-2)", rp.PAIR),
    ],
)
def test_cos_sin_widenings_are_recognised(expression, layout):
    assert [w.layout for w in _index(f"import torch\nemb = {expression}\n").widenings] == [layout]


def test_a_returned_name_rebound_from_itself_ends_the_rotation_search():
    """``x = x.view(...); return x.permute(...)`` (SqueezeBERT's transpose_for_scores) once looped forever."""
    source = "def transpose_for_scores(x):\n    x = x.view(2, 3, 4)\n    return x.view(6, 4)\n"
    index = rp.build_rope_index(FileFacts(cst.parse_module(source)))
    assert index.rotations == {}


def test_a_file_with_no_rope_words_is_never_walked():
    """The index's parts ask the text first: ``using`` alone (ATT403's prefilter) walks nothing."""
    index = _index("def norm(x):\n    # using the mean\n    return x / x.sum(-1) + x * 2\n")
    assert (index.applications, index.powers, index.base_products, index.rotations) == ([], [], [], {})
    assert not index.uses_rotation_formula
    assert "_nodes" not in vars(index)


def test_renamed_imports_are_still_recognised():
    """The words the text is asked for come from the import when a helper is renamed."""
    source = (
        "from torch import cat as join, arange as span\n\n"
        "def rot(x):\n    x1, x2 = x.chunk(2, dim=-1)\n    return join((x2, -x1), dim=-1)\n\n"
        "def apply(q, cos, sin):\n    return q * cos + rot(q) * sin\n\n"
        "def freqs(d):\n    return 10000 ** (span(0, d, 2) / d)\n"
    )
    index = _index(source)
    assert (index.rotations["rot"].sign, [a.sign for a in index.applications]) == (-1, [-1])
    assert len(index.powers) == 1


def test_each_node_knows_its_parent_and_function():
    index = _index("import torch\n\ndef rope(d):\n    inv = 1.0 / (10000 ** (torch.arange(0, d, 2) / d))\n")
    (power,) = index.powers
    (fn,) = index.facts.functions
    assert isinstance(index.parent(power.node), cst.BinaryOperation)
    assert index.scope(power.node) is fn
    assert index.scope(power.arange) is fn
    assert power.arange in index.nodes_in(fn)


class _Reference(cst.CSTVisitor):
    """libcst's own walk: every call, binary operation, subscript and return in pre-order,
    with the function whose own scope holds it, and each one's parent."""

    def __init__(self, facts: FileFacts) -> None:
        self.facts, self.scopes, self.found, self.parents = facts, [None], [], {}
        self.stack: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.Call, cst.BinaryOperation, cst.Subscript, cst.Return)):
            self.found.append((type(node).__name__, self.scopes[-1], node))
            self.parents[id(node)] = self.stack[-1]
        self.stack.append(node)
        if isinstance(node, cst.FunctionDef):
            self.scopes.append(self.facts.function(node))
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()
        if isinstance(original_node, cst.FunctionDef):
            self.scopes.pop()


_EVERY_PLACE = '''
@decorate(torch.cat((-a[1:], b), -1))
def f(x, y=g(2) ** 3, *, z: h(1) = None):
    lam = lambda q: q * cos(q) + k[0]
    data = [t.sin() for t in xs if t[0] / 2] + {u: v(u) for u in w}
    print(f"{x[0] * 2!r:>{width(3)}}")
    with ctx(x) as (p, r[0]):
        for i in range(n(1)):
            while x[i] - 1:
                del d[i]
                yield x @ y
    match m(x):
        case [a, *rest] if a[0] > f(1):
            return a[1:] ** 2
    class Inner(Base(1)):
        def method(self, s=self.v[0]):
            return s / norm(s)
    return (yield from gen(x)), not x[0], -x @ y, await z(1) if c(0) else {**kw(1)}
'''


@pytest.mark.parametrize(
    "path", [None, *_fixtures("buggy"), *_fixtures("correct")], ids=lambda p: p.name if p else "every-place"
)
def test_the_index_walk_finds_what_libcst_visits(path):
    """The walk skips leaves and whitespace fields by their annotations: nothing else is lost."""
    source = _EVERY_PLACE if path is None else path.read_text()
    facts = FileFacts(cst.parse_module(source))
    reference = _Reference(facts)
    facts.module.visit(reference)
    nodes = rp.build_rope_index(facts, source)._nodes
    kinds = (("Call", nodes.calls), ("BinaryOperation", nodes.binops), ("Subscript", nodes.subscripts))
    for kind, walked in kinds:
        expected = [(fn, node) for name, fn, node in reference.found if name == kind]
        assert [(id(fn), id(node)) for fn, node in walked] == [(id(fn), id(node)) for fn, node in expected]
    returns = [(id(fn), id(node)) for name, fn, node in reference.found if name == "Return"]
    assert sorted(returns) == sorted((key, id(node)) for key, found in nodes.returns.items() for node in found)
    assert all(nodes.parent(node) is reference.parents[id(node)] for _, _, node in reference.found)


@pytest.mark.parametrize("path", sorted(FIXTURES.rglob("*.py")), ids=lambda p: p.name)
def test_the_rope_index_of_a_fast_trees_events_is_that_of_a_walk(path: Path, monkeypatch) -> None:
    """The calls, products, subscripts, returns and scopes read from the events are what a walk of
    the tree records, and the parents, found statement by statement when asked, are a walk's."""
    module = fast_tree.build(path.read_text(encoding="utf-8"))
    facts = FileFacts(module)
    replayed = rp.build_rope_index(facts, "")._nodes
    monkeypatch.setattr(type(module), "EVENT_CLASSES", frozenset())  # no replay: a walk of the tree
    walked = rp.build_rope_index(facts, "")._nodes
    monkeypatch.undo()
    for part in ("calls", "binops", "expressions", "subscripts"):
        assert [(id(fn), id(node)) for fn, node in getattr(replayed, part)] == \
               [(id(fn), id(node)) for fn, node in getattr(walked, part)], part
    assert {key: [id(r) for r in found] for key, found in replayed.returns.items()} == \
           {key: [id(r) for r in found] for key, found in walked.returns.items()}
    assert {key: id(fn) for key, fn in replayed.scope_of.items()} == \
           {key: id(fn) for key, fn in walked.scope_of.items()}
    parents: dict[int, cst.CSTNode] = {}  # every node's but those of leaves and below them
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        inner = [child for child in subtree.children(node) if type(child) not in rp._LEAVES]
        parents.update((id(child), node) for child in inner)
        stack.extend(inner)
    for node in reversed(list(subtree.preorder(module))):  # the deepest first: every statement gets walked
        assert replayed.parent(node) is parents.get(id(node)), type(node).__name__
    built = cst.Subscript(cst.Name("q"), [cst.SubscriptElement(cst.Index(cst.Integer("0")))])
    assert replayed.parent(built) is None
