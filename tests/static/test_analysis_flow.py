"""The per-function analyses that read a function's preorder: what a name held at a use
(``patterns.LocalFlow``) and which assignments a use can see (``Semantics.values``)."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst
import pytest

from attncheck.static.analysis import patterns, semantics
from attncheck.static.facts import FileFacts
from attncheck.static.tree import fast_tree, subtree

SOURCE = '''
def f(x, n=default):
    y = x
    y = g(y)
    a, b = y
    z = lambda t: y + t
    def inner():
        y = 0
        return y
    y += 1
    if n:
        s = 1
        u = s
    else:
        s = 2
        v = s
    q = 1
    r = q
    q = 2
    for i in range(n):
        k = m
        m = k * 2
    return y, a, b, s
'''

PARSERS: list[Callable[[str], cst.Module]] = [cst.parse_module, fast_tree.build]


def _setup(parse: Callable[[str], cst.Module]) -> tuple[cst.Module, FileFacts]:
    module = parse(SOURCE)
    return module, FileFacts(module)


def _names(root: cst.CSTNode, value: str) -> list[cst.Name]:
    """The Names spelled ``value`` under ``root``, in source order."""
    return [n for n in subtree.preorder(root) if type(n) is cst.Name and n.value == value]


@pytest.mark.parametrize("parse", PARSERS)
def test_a_use_sees_the_last_value_written_before_it(parse: Callable[[str], cst.Module]) -> None:
    module, facts = _setup(parse)
    fn = facts.functions[0]
    flow = patterns.Tracer(facts).flow(fn)
    ys = _names(fn.node, "y")
    code = module.code_for_node

    def held(name: cst.Name) -> str | None:
        value = flow.value_at(name)
        return None if value is None else code(value).strip()

    # y = x; y = g(y); a, b = y; lambda t: y + t; def inner(): y = 0; return y; y += 1; return y
    assert held(ys[0]) is None  # nothing is written before
    assert held(ys[1]) == "x"  # ``y = g(y)`` writes y once g(y) is read
    assert held(ys[2]) == "x"
    assert held(ys[3]) == "g(y)"  # a, b = y
    assert held(ys[4]) is None  # in the lambda: another scope
    assert held(ys[6]) is None  # in ``inner``
    assert held(ys[8]) == "y + 1"  # returned after ``y += 1``
    assert held(_names(fn.node, "a")[-1]) == "y[0]"
    assert held(_names(fn.node, "x")[0]) is None  # the parameter: not in the body
    assert held(_names(fn.node, "k")[-1]) == "m"  # ``m = k * 2`` reads the k just written
    assert flow.is_after(ys[8], ys[3]) and not flow.is_after(ys[3], ys[8])
    assert not flow.is_after(ys[4], _names(fn.node, "x")[0])  # neither is in the flow
    assert flow.contains(ys[3]) and not flow.contains(ys[6])


@pytest.mark.parametrize("parse", PARSERS)
def test_values_leave_out_other_arms_and_later_writes(parse: Callable[[str], cst.Module]) -> None:
    module, facts = _setup(parse)
    fn = facts.functions[0]
    sem = semantics.Semantics(module, facts)

    def seen(name: cst.Name) -> list[str]:
        return [module.code_for_node(v).strip() for v, _ in sem.values(name, fn)]

    s_reads = _names(fn.node, "s")
    assert seen(s_reads[1]) == ["1"]  # u = s, in the if arm
    assert seen(s_reads[3]) == ["2"]  # v = s, in the else arm
    assert seen(s_reads[4]) == ["1", "2"]  # after the if
    assert seen(_names(fn.node, "q")[1]) == ["1"]  # r = q: ``q = 2`` comes later
    assert seen(_names(fn.node, "m")[0]) == ["k * 2"]  # k = m: a later write in the same loop


CLASS = '''
class A:
    def __init__(self):
        self.drop = Dropout()
    def forward(self, x):
        y = self.drop(x)
        f = lambda: self.drop
        def inner():
            return self.drop
        class B:
            z = self.drop
        self.drop(x)
        return y
    def other(self):
        return self.drop.p
'''


@pytest.mark.parametrize("parse", PARSERS)
def test_a_method_reads_the_attributes_its_own_code_reads(parse: Callable[[str], cst.Module]) -> None:
    module = parse(CLASS)
    facts = FileFacts(module)
    sem = semantics.Semantics(module, facts)
    klass = facts.classes["A"]
    # Not in __init__, the lambda nor ``inner``; in the body of the class ``forward`` defines.
    assert [fn.name for fn, _ in sem.index.attr_refs.get((id(klass), "drop"), [])] == [
        "forward", "forward", "forward", "other"
    ]
    assert [fn.name for fn, _ in sem.references_outside_init(klass, "drop")] == ["forward", "forward", "other"]
