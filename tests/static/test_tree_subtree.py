"""subtree's walk visits the non-trivia nodes libcst's own children give, in the same order."""

from __future__ import annotations

import libcst as cst

from attncheck.static.tree import fast_tree, node_fields, subtree

SOURCE = '''
from x import (a as b, c)
from y import *
import torch.nn as nn

@decorator(1)
class Attention(nn.Module, metaclass=Meta):
    """Doc."""

    def forward(self, q: torch.Tensor, *args, k=None, **kw) -> torch.Tensor:
        s = (q @ k.transpose(-2, -1)) / self.d_k ** 0.5
        s += 1
        a, (b, c) = s, (1, 2)
        if mask is not None:
            s = s.masked_fill(mask == 0, float("-inf"))
        elif flag:
            pass
        else:
            s = -s
        for i in range(3):
            while i < 2:
                i = i + 1
        with ctx() as f, other():
            y = [v for v in s if v] + {k: v for k, v in d.items()} + {*z}
        try:
            g = lambda t, u=1: t * u
        except (ValueError, KeyError) as e:
            raise RuntimeError(f"{e!r:>10} {g}") from e
        finally:
            del g
        x: int = yield from s
        return s.softmax(dim=-1)[..., None], not a, a if b else c, (await w)
'''
MATCH = '''
match s:
    case [1, *rest] if rest:
        pass
    case {"k": v, **others}:
        pass
'''


def _expected(root: cst.CSTNode) -> list[cst.CSTNode]:
    found = [] if type(root) in node_fields.TRIVIA else [root]
    for child in node_fields.children(root):
        found.extend(_expected(child))
    return found


def test_preorder_matches_libcst_children_without_trivia() -> None:
    for module in (cst.parse_module(SOURCE + MATCH), fast_tree.build(SOURCE)):
        expected = _expected(module)
        assert [id(n) for n in subtree.preorder(module)] == [id(n) for n in expected]
        assert len(expected) > 200


def test_fields_drop_the_ones_that_hold_only_trivia() -> None:
    assert subtree.fields(cst.Call) == ("func", "args")
    assert subtree.fields(cst.If) == ("test", "body", "orelse")
    assert subtree.fields(cst.Name) == ()


def test_concrete_names_the_classes_in_use() -> None:
    assert subtree.concrete(cst.BaseSuite) == {cst.IndentedBlock, cst.SimpleStatementSuite}


def test_a_preorder_lists_the_nodes_and_where_each_marked_subtree_ends() -> None:
    for module in (cst.parse_module(SOURCE), fast_tree.build(SOURCE)):
        function = next(n for n in subtree.preorder(module) if type(n) is cst.FunctionDef)
        found = subtree.Preorder(function)
        assert [id(n) for n in found.nodes] == [id(n) for n in subtree.preorder(function)]
        assert found.where == {id(n): index for index, n in enumerate(found.nodes)}
        expected = [
            (index, id(n), index + len(list(subtree.preorder(n))))
            for index, n in enumerate(found.nodes)
            if type(n) in subtree.Preorder.MARKED
        ]
        assert sorted((start, id(n), end) for start, n, end in found.marked) == expected
        assert [end for _, _, end in found.marked] == sorted(end for _, _, end in found.marked)
        assert {type(n) for _, n, _ in found.marked} == subtree.Preorder.MARKED - {cst.ClassDef}
