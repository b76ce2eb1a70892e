"""ATT205 softmax-discarded: a softmax result must be used before its name is bound again."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from attncheck.static.analysis import semantics
from attncheck.static.analysis.blocks import bound, rebinding, straight_blocks
from attncheck.static.analysis.patterns import tracer
from attncheck.static.facts import FunctionFacts
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
        # the probabilities are computed, and the product with V takes the scores instead.
        Invalid(_cls("attn = self.dropout(attn)").replace("return attn @ v", "return torch.matmul(dots, v)"),
                line=13, message="before the softmax"),
    )

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        # A hook on FunctionDef, not IndentedBlock: the walk of a fast tree replays the events of
        # definitions, calls and assignments, and a block hook would make every file walked in full.
        fn = self.context.facts.function(node)
        if fn is None:
            return
        sem = semantics.of(self.context)
        self._check_scores_weighting(fn, sem)
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



    def _check_scores_weighting(self, fn: FunctionFacts, sem: semantics.Semantics) -> None:
        """``attn = softmax(scores)`` then ``matmul(scores, v)``: the values are weighted by the scores
        the softmax read (the same binding of the name), not by its probabilities."""
        softmaxes = [found for call in fn.calls if (found := sem.softmax(call, fn)) is not None]
        named = [s for s in softmaxes if type(s.input) is cst.Name]
        if not named:
            return
        flow = tracer(self.context).flow(fn)
        inputs = [(s, flow.value_at(s.input)) for s in named]
        for weights, product in _value_products(fn):
            if type(weights) is not cst.Name:
                continue
            for softmax, held in inputs:
                if (
                    weights.value == softmax.input.value
                    and held is not None
                    and flow.value_at(weights) is held
                    and flow.is_after(product, softmax.call)
                ):
                    self.report(
                        product,
                        f"`{sem.code(product)}` weights the values by `{weights.value}`, the scores before the "
                        f"softmax, not by the probabilities {softmax.where} makes of them: they are thrown away",
                        hint=f"multiply the softmax's result by v, not {weights.value}",
                    )
                    return


def _value_products(fn: FunctionFacts) -> Iterator[tuple[cst.BaseExpression, cst.CSTNode]]:
    """(left operand, product) of each ``a @ b``, ``torch.matmul(a, b)`` and ``torch.bmm(a, b)`` of ``fn``."""
    for node in fn.preorder.nodes:
        if type(node) is cst.BinaryOperation and type(node.operator) is cst.MatrixMultiply:
            yield node.left, node
        elif type(node) is cst.Call and _method_or_function(node) in ("matmul", "bmm") and len(node.args) == 2:
            yield node.args[0].value, node


def _method_or_function(call: cst.Call) -> str | None:
    func = call.func
    return func.attr.value if type(func) is cst.Attribute else func.value if type(func) is cst.Name else None
