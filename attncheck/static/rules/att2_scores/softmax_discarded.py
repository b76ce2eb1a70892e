"""ATT205 softmax-discarded: a softmax result must be used before its name is bound again."""

from __future__ import annotations

import libcst as cst

from attncheck.static.analysis import semantics
from attncheck.static.analysis.blocks import bound, rebinding, straight_blocks
from attncheck.static.rule import Invalid, Rule

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
                rebound = rebinding(statements[position + 1:], name)
                if rebound is not None:
                    self.report(
                        value,
                        f"the softmax result `{name}` is overwritten by `{sem.code(rebound)}` before it is "
                        "used: the probabilities are thrown away",
                        hint=f"use {name} in the next step: {name} = <next step>({name})",
                    )


