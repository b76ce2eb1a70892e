"""ATT205 softmax-discarded: a softmax result must be used before its name is bound again."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from attncheck.static.analysis import semantics
from attncheck.static.rule import Invalid, Rule
from attncheck.static.rules.att2_scores.blocks import bound, reads, straight_blocks

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
        for statements in straight_blocks(node.body):
            for position, statement in enumerate(statements):
                name, value = bound(statement)
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



def _rebinding(following: Sequence[cst.BaseStatement], name: str) -> cst.BaseExpression | None:
    """The value of the first later ``name = value`` of the block that does not read ``name``, when
    no statement before it reads it either; None when the name is read first (or never rebound)."""
    for statement in following:
        bound_name, value = bound(statement)
        if bound_name == name and value is not None and not reads(value, name):
            return value
        if reads(statement, name):
            return None
    return None
