"""Lint workers pause Python's cycle collector, which is only sound while a lint
leaves no reference cycles holding its trees: reference counting must free them."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import libcst as cst
import pytest

from attncheck import collector
from attncheck.sources import Source
from attncheck.static.engine import lint
from attncheck.static.rules import all_rules
from attncheck.static.tree import fast_tree

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "fixtures" / "buggy").rglob("*.py")) + sorted((ROOT / "fixtures" / "correct").rglob("*.py"))


@pytest.fixture
def saved_garbage() -> Iterator[list[object]]:
    """What a full collection finds unreachable, kept in ``gc.garbage`` instead of freed."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()


def _lint_all() -> int:
    return sum(len(lint(Source(str(path), path.read_text(encoding="utf-8")), all_rules()).findings)
               for path in FIXTURES)


def _tree_objects(garbage: list[object]) -> list[str]:
    return sorted({type(o).__qualname__ for o in garbage
                   if isinstance(o, cst.CSTNode) or type(o).__module__.startswith("attncheck.")})


def test_a_lint_leaves_no_cycles_holding_its_trees(saved_garbage):
    assert _lint_all() > 50  # the buggy fixtures: both the fast tree and libcst's are built
    gc.collect()
    assert _tree_objects(saved_garbage) == []


def test_nor_on_libcsts_own_tree(saved_garbage, monkeypatch):
    def refuse(text: str) -> fast_tree.FastModule:
        raise fast_tree.NotModelledError("libcst's own tree only")

    monkeypatch.setattr(fast_tree, "build", refuse)
    assert _lint_all() > 50
    gc.collect()
    assert _tree_objects(saved_garbage) == []


def test_a_paused_collector_runs_once_the_leftovers_pass_the_bound(monkeypatch):
    enabled = gc.isenabled()
    gc.disable()
    try:
        cycles = []
        for _ in range(50):
            cycle: list[object] = []
            cycle.append(cycle)
            cycles.append(cycle)
        monkeypatch.setattr(collector, "LEFT_OVER_LIMIT", 10**9)
        collector.after_file()
        assert gc.get_count()[0] >= 50  # below the bound: nothing collected
        monkeypatch.setattr(collector, "LEFT_OVER_LIMIT", 10)
        collector.after_file()
        assert gc.get_count()[0] < 10  # a collection resets the count
        assert gc.get_freeze_count() >= len(cycles)  # the survivors are not scanned again
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()


def test_an_enabled_collector_is_left_to_itself(monkeypatch):
    assert gc.isenabled()
    monkeypatch.setattr(gc, "collect", lambda *a: pytest.fail("collected by hand"))
    monkeypatch.setattr(collector, "LEFT_OVER_LIMIT", -1)
    collector.after_file()
