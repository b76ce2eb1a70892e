"""ATT205 softmax-discarded: a softmax result must be used before its name is bound again."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import libcst as cst

from attncheck.static.analysis import semantics
from attncheck.static.rule import Invalid, Rule
from attncheck.static.tree import subtree

_CLASS = """
import torch, torch.nn as nn
class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.to_qkv = nn.Linear(dim, 3 * dim)
        self.dropout = nn.Dropout(0.1)
    def forward(self, x):
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        dots = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
        attn = dots.softmax(dim=-1)
        {line}
        return attn @ v
"""


def _cls(line: str) -> str:
    return _CLASS.replace("{line}", line)


class SoftmaxDiscarded(Rule):
    code = "ATT205"
    PREFILTER = ("softmax", "Softmax")
    VALID = (
        _cls("attn = self.dropout(attn)"),
        _cls("probs = attn\n        attn = self.dropout(dots)"),  # read before the rebinding
        _cls("if self.training:\n            attn = self.dropout(dots)"),  # a branch: not straight-line
        _cls("attn = self.dropout(attn.to(v.dtype))"),
    )
    INVALID = (
        Invalid(_cls("attn = self.dropout(dots)"), line=11, message="self.dropout(dots)"),
        Invalid(_cls("x = 1\n        attn = dots"), line=11, message="overwritten"),
    )

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        # A hook on FunctionDef, not IndentedBlock: the walk of a fast tree replays the events of
        # definitions, calls and assignments, and a block hook would make every file walked in full.
        fn = self.context.facts.function(node)
        if fn is None:
            return
        sem = semantics.of(self.context)
        for statements in _blocks(node.body):
            for position, statement in enumerate(statements):
                name, value = _bound(statement)
                if name is None or type(value) is not cst.Call or sem.softmax(value, fn) is None:
                    continue
                rebinding = _rebinding(statements[position + 1:], name)
                if rebinding is not None:
                    self.report(
                        value,
                        f"the softmax result `{name}` is overwritten by `{sem.code(rebinding)}` before it is "
                        "used: the probabilities are thrown away",
                        hint=f"use {name} in the next step: {name} = <next step>({name})",
                    )


def _blocks(suite: cst.BaseSuite) -> Iterator[Sequence[cst.BaseStatement]]:
    """The statement lists of a function body and of the ``if``/``for``/``while``/``with``/``try``
    blocks inside it (not of nested definitions, which are visited on their own)."""
    if type(suite) is not cst.IndentedBlock:
        return
    yield suite.body
    for statement in suite.body:
        for inner in _suites(statement):
            yield from _blocks(inner)


def _suites(statement: cst.BaseStatement) -> list[cst.BaseSuite]:
    """The blocks a compound statement holds: its body, ``elif``/``else`` arms, handlers, ``finally``."""
    if type(statement) not in (cst.If, cst.For, cst.While, cst.With, cst.Try):
        return []
    found = [statement.body]
    other = getattr(statement, "orelse", None)
    while other is not None:
        found.append(other.body)
        other = other.orelse if type(other) is cst.If else None
    found += [handler.body for handler in getattr(statement, "handlers", ())]
    final = getattr(statement, "finalbody", None)
    return [*found, final.body] if final is not None else found


def _bound(statement: cst.BaseStatement) -> tuple[str | None, cst.BaseExpression | None]:
    """``(name, value)`` of a simple ``name = value`` statement; ``(None, None)`` otherwise."""
    if type(statement) is not cst.SimpleStatementLine or len(statement.body) != 1:
        return None, None
    small = statement.body[0]
    if type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Name:
        return small.targets[0].target.value, small.value
    return None, None


def _rebinding(following: list[cst.BaseStatement], name: str) -> cst.BaseExpression | None:
    """The value of the first later ``name = value`` of the block that does not read ``name``, when
    no statement before it reads it either; None when the name is read first (or never rebound)."""
    for statement in following:
        bound, value = _bound(statement)
        if bound == name and value is not None and not _reads(value, name):
            return value
        if _reads(statement, name):
            return None
    return None


def _reads(node: cst.CSTNode, name: str) -> bool:
    return any(type(n) is cst.Name and n.value == name for n in subtree.preorder(node))
