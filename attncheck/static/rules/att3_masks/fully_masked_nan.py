"""ATT303 fully-masked-nan: ``-inf`` fill with no guard against rows with no visible key."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import libcst as cst

from attncheck.static.analysis.patterns import (
    FillSite,
    Tracer,
    constant_value,
    fill_site,
    method_name,
    selects_fully_masked_rows,
    tracer,
)
from attncheck.static.analysis.syntax import number
from attncheck.static.context import FileContext
from attncheck.static.facts import FileFacts, FunctionFacts, self_attribute
from attncheck.static.rule import Invalid, Rule

# Calls that show the function deals with all-masked rows.
_GUARDS = frozenset({"nan_to_num", "nan_to_num_", "isnan", "isfinite", "isinf", "clamp_min", "clamp_min_"})
# A causal mask always leaves the diagonal visible, so no row is fully masked.
# A fill target named like this is an additive mask that scores will be added to.
_ADDITIVE_MASK = re.compile(r"mask|bias", re.IGNORECASE)
_CAUSAL = re.compile(r"(tril|triu|causal|future|subsequent|look_?ahead|\bbias\b)", re.IGNORECASE)


class FullyMaskedNan(Rule):
    code = "ATT303"
    PREFILTER = ("inf",)
    VALID = (
        "def f(s, mask):\n    s = s.masked_fill(mask == 0, torch.finfo(s.dtype).min)\n"
        "    return s.softmax(-1)",
        "def f(s, mask):\n    s = s.masked_fill(~mask, float('-inf'))\n"
        "    return torch.nan_to_num(s.softmax(-1), nan=0.0)",
        "def f(self, att, T):\n    att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))\n"
        "    return F.softmax(att, dim=-1)",
        "def f(s, causal_mask):\n    return s.masked_fill(causal_mask, -math.inf).softmax(-1)",
        # The fully masked rows are zeroed after the softmax.
        "def f(s, mask):\n    p = s.masked_fill(~mask, float('-inf')).softmax(-1)\n"
        "    return p.masked_fill(~mask.any(-1, keepdim=True), 0.0)",
        # a causal band of triangles, 1 on the diagonal, its zeros blocked (issue 20)
        "def f(s, n, window):\n    ones = torch.ones(n, n)\n"
        "    keep = torch.tril(ones) - torch.tril(ones, diagonal=-window)\n"
        "    return s.masked_fill(keep == 0, float('-inf')).softmax(-1)",
        # a sliding window that always keeps the diagonal (issue 20): no row is fully masked
        "def f(s, i, j, window):\n    blocked = (j > i) | (i - j >= window)\n"
        "    return s.masked_fill(blocked, float('-inf')).softmax(-1)",
        # Generation logits processors: a vocabulary mask on sampling logits, never a softmax here.
        "def f(self, input_ids, scores):\n    banned = scores.new_zeros(scores.shape, dtype=torch.bool)\n"
        "    return scores.masked_fill(banned, -float('inf'))",
        # DeepSeek-V3.2's sparse-attention indexer: masked scores pick the top-k keys, no softmax.
        "def f(self, q, k, attention_mask):\n    scores = torch.matmul(q, k.transpose(-1, -2))\n"
        "    scores = scores.masked_fill(~attention_mask, float('-inf'))\n"
        "    return scores.topk(self.index_topk, dim=-1).indices",
        # timm ZLPR loss: log-sum-exp with an appended zero logit.
        "def f(x, pos, zeros):\n    neg = torch.cat([x.masked_fill(pos, float('-inf')), zeros], -1)\n"
        "    return torch.logsumexp(neg, -1)",
    )
    INVALID = (
        Invalid(
            "def f(s, mask):\n    s = s.masked_fill(mask == 0, float('-inf'))\n    return s.softmax(-1)",
            line=2,
            message="NaN",
        ),
        Invalid("def f(s, pad):\n    return torch.softmax(s.masked_fill(pad, -float('inf')), -1)", line=2),
        Invalid(  # j >= i blocks the diagonal: the first query sees nothing
            "def f(s, i, j):\n    return torch.softmax(s.masked_fill(j >= i, float('-inf')), -1)", line=2
        ),
        Invalid("def f(s, m):\n    return F.softmax(torch.where(m, s, -torch.inf), dim=-1)", line=2),
        Invalid('def f(s, m):\n    s.masked_fill_(m, float("-inf"))\n    return s.softmax(-1)', line=2),
        # NeMo-style relative position term handed to the attention function as its mask.
        Invalid(
            "def f(self, q, k, v, bd, attention_mask):\n"
            "    bd = bd.masked_fill_(attention_mask.logical_not(), float('-inf'))\n"
            "    return attention_interface(self, q, k, v, attention_mask=bd)",
            line=2,
        ),
    )

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self.tracer = tracer(context)

    def visit_Call(self, node: cst.Call) -> None:
        facts = self.context.facts
        site = fill_site(node, facts)
        fn = self.context.function
        if site is None:
            return
        value, _ = self.tracer.origin(site.value, fn, through=frozenset())
        number = constant_value(value, facts)
        if number is None or not (math.isinf(number) and number < 0):
            return
        if not self._fills_attention(site, fn):
            return
        mask = self.context.module.code_for_node(site.mask)
        if _CAUSAL.search(mask) or self._mask_is_causal(site.mask, fn) or _guarded(fn, facts):
            return
        self.report(
            node,
            f"positions selected by `{mask}` are filled with -inf and nothing guards a query whose "
            "keys are all masked: its softmax is 0/0 and the whole output row becomes NaN",
            hint="fill with torch.finfo(scores.dtype).min instead, or zero the fully masked rows "
            "after the softmax (torch.nan_to_num / masked_fill of rows where the mask is all blocked)",
            evidence=[f"-inf fill under mask `{mask}`", "no nan_to_num/isnan/finfo guard in this function"],
        )

    def _fills_attention(self, site: FillSite, fn: FunctionFacts | None) -> bool:
        """The fill writes attention scores that a softmax takes here or that go to attention as
        its mask, or it builds an additive attention mask (``attn_bias.masked_fill_(~m, -inf)``).

        A vocabulary mask on sampling logits (generation processors, a loss's
        log-sum-exp), a sparse-attention indexer's scores before ``topk`` and a
        detection head's class logits are none of these: no softmax turns their
        fully masked rows into NaN.
        """
        if site.target is None:
            return False
        if _ADDITIVE_MASK.search(self.context.module.code_for_node(site.target)):
            return True
        return self.tracer.feeds_attention(site, fn)

    def _mask_is_causal(self, mask: cst.BaseExpression, fn: FunctionFacts | None) -> bool:
        origin, _ = self.tracer.origin(mask, fn, through=frozenset({"bool", "to", "unsqueeze", "view"}))
        code = self.context.module.code_for_node
        return bool(_CAUSAL.search(code(origin))) or _Diagonal(self.tracer, fn, code).holds(mask) is False


_SHAPING = frozenset({"bool", "to", "unsqueeze", "view", "reshape", "expand", "contiguous"})
_HOLDS = {  # whether ``a OP b`` holds when a - b has this sign
    cst.GreaterThan: {1: True, 0: False, -1: False},
    cst.GreaterThanEqual: {1: True, 0: True, -1: False},
    cst.LessThan: {1: False, 0: False, -1: True},
    cst.LessThanEqual: {1: False, 0: True, -1: True},
    cst.Equal: {1: False, 0: True, -1: False},
    cst.NotEqual: {1: True, 0: False, -1: True},
}


class _Diagonal:
    """What a mask built from index comparisons holds where the query and the key index are
    equal: ``(j > i) | (i - j >= window)`` (a sliding window, blocked) and ``~((rel <= 0) &
    (rel > -window))`` with ``rel = pos[None, :] - pos[:, None]`` (the same, kept) are both
    false there, so they never block the diagonal and no row is fully masked. Window sizes
    (names, attributes, positive literals) are taken as positive, as in every real window."""

    def __init__(self, tracer: Tracer, fn: FunctionFacts | None, code: Callable[[cst.CSTNode], str]) -> None:
        self.tracer, self.fn, self.code = tracer, fn, code

    def holds(self, mask: cst.BaseExpression, depth: int = 0) -> bool | None:
        """True or False on the diagonal, None when the expression says nothing about it."""
        if depth > 12:
            return None
        kind = type(mask)
        if kind is cst.BinaryOperation and type(mask.operator) in (cst.BitOr, cst.BitAnd):
            sides = self.holds(mask.left, depth + 1), self.holds(mask.right, depth + 1)
            decisive = type(mask.operator) is cst.BitOr  # True decides an or, False an and
            if decisive in sides:
                return decisive
            return None if None in sides else not decisive
        if kind is cst.UnaryOperation and type(mask.operator) is cst.BitInvert:
            inner = self.holds(mask.expression, depth + 1)
            return None if inner is None else not inner
        if kind is cst.Comparison and len(mask.comparisons) == 1:
            comparison = mask.comparisons[0]
            sign = self._difference(mask.left, comparison.comparator, depth)
            if sign is None:  # a band of triangles held against a number: ``keep == 0``
                value, against = self.value(mask.left, depth + 1), number(comparison.comparator)
                sign = None if value is None or against is None else (value > against) - (value < against)
            return None if sign is None else _HOLDS.get(type(comparison.operator), {}).get(sign)
        if kind is cst.Subscript or (kind is cst.Call and method_name(mask) in _SHAPING):
            return self.holds(mask.value if kind is cst.Subscript else mask.func.value, depth + 1)
        stepped = self.tracer.step(mask, self.fn) if kind is cst.Name else None
        return None if stepped is None else self.holds(stepped[0], depth + 1)

    def value(self, node: cst.BaseExpression, depth: int = 0) -> float | None:
        """The number a mask of ones and triangles holds on the diagonal: ``tril(ones) -
        tril(ones, diagonal=-window)`` (a causal band, 1 - 0) holds 1 there."""
        if depth > 12:
            return None
        kind = type(node)
        literal = number(node) if kind in (cst.Integer, cst.Float) else None
        if literal is not None:
            return literal
        if kind is cst.BinaryOperation and type(node.operator) in (cst.Add, cst.Subtract):
            left, right = self.value(node.left, depth + 1), self.value(node.right, depth + 1)
            if left is None or right is None:
                return None
            return left + right if type(node.operator) is cst.Add else left - right
        if kind is cst.Name:
            stepped = self.tracer.step(node, self.fn)
            return None if stepped is None else self.value(stepped[0], depth + 1)
        if kind is not cst.Call:
            return None
        name = method_name(node) or _torch_function(node)
        if name in ("ones", "ones_like", "new_ones"):
            return 1.0
        if name in ("zeros", "zeros_like", "new_zeros"):
            return 0.0
        if name in _SHAPING:
            return self.value(node.func.value, depth + 1)
        return self._triangle(node, name, depth)

    def _triangle(self, node: cst.Call, name: str | None, depth: int) -> float | None:
        """``tril``/``triu`` of ones (a function or a method) on the diagonal: tril keeps it for a
        diagonal offset >= 0, triu for <= 0; an offset is a literal or a (positive) window size."""
        if name not in ("tril", "triu"):
            return None
        method = type(node.func) is cst.Attribute and method_name(node) == name and not _torch_function(node)
        operand = node.func.value if method else (node.args[0].value if node.args else None)
        rest = [a for a in node.args if a.keyword is None][0 if method else 1 :]
        offset = next((a.value for a in node.args if a.keyword is not None and a.keyword.value == "diagonal"), None)
        offset = offset if offset is not None else (rest[0].value if rest else None)
        ones = self.value(operand, depth + 1) if operand is not None else None
        sign = 0 if offset is None else self._sign(offset, depth + 1)
        if ones is None or sign is None:
            return None
        kept = sign >= 0 if name == "tril" else sign <= 0
        return ones if kept else 0.0

    def _difference(self, left: cst.BaseExpression, right: cst.BaseExpression, depth: int) -> int | None:
        """The sign of ``left - right`` on the diagonal."""
        if _indices(left, right, self.code):
            return 0  # j > i: two different indices, equal on the diagonal
        if not (self._offset(left, depth) or self._offset(right, depth)):
            return None  # a size is only known positive where a query-key offset is held against it
        signs = self._sign(left, depth), self._sign(right, depth)
        if None in signs or signs[0] == signs[1] != 0:
            return None
        return signs[0] if signs[0] != 0 else -signs[1]

    def _offset(self, node: cst.BaseExpression, depth: int) -> bool:
        """``i - j``, ``(i - j).abs()``, ``-rel`` or a name bound to one: a query-key offset."""
        while depth <= 12:
            depth += 1
            if type(node) is cst.UnaryOperation and type(node.operator) is cst.Minus:
                node = node.expression
            elif type(node) is cst.Call and method_name(node) == "abs":
                node = node.func.value
            elif type(node) is cst.BinaryOperation and type(node.operator) is cst.Subtract:
                return _indices(node.left, node.right, self.code)
            else:
                stepped = self.tracer.step(node, self.fn) if type(node) is cst.Name else None
                if stepped is None:
                    return False
                node = stepped[0]
        return False

    def _sign(self, node: cst.BaseExpression, depth: int) -> int | None:
        """The sign of a position difference (0 on the diagonal), a window size or a literal."""
        if depth > 12:
            return None
        kind = type(node)
        literal = number(node) if kind in (cst.Integer, cst.Float) else None
        if literal is not None:
            return (literal > 0) - (literal < 0)
        if kind is cst.UnaryOperation and type(node.operator) is cst.Minus:
            inner = self._sign(node.expression, depth + 1)
            return None if inner is None else -inner
        if kind is cst.BinaryOperation and type(node.operator) is cst.Subtract:
            return 0 if _indices(node.left, node.right, self.code) else None
        if kind is cst.Call and method_name(node) == "abs":
            return self._sign(node.func.value, depth + 1)
        if kind is cst.Name or self_attribute(node) is not None:
            return 0 if self._offset(node, depth + 1) else 1  # an offset, or a size: a window, positive
        return None


def _indices(one: cst.BaseExpression, other: cst.BaseExpression, code: Callable[[cst.CSTNode], str]) -> bool:
    """Two different index tensors: ``i`` and ``j``, or ``pos[:, None]`` and ``pos[None, :]``."""
    names = [node.value if type(node) is cst.Subscript else node for node in (one, other)]
    return all(type(name) is cst.Name for name in names) and code(one) != code(other)


def _guarded(fn: FunctionFacts | None, facts: FileFacts) -> bool:
    if fn is None:
        return False
    for call in fn.calls:
        name = method_name(call) or (facts.canonical(call.func) or "").rsplit(".", 1)[-1]
        if name in _GUARDS or (
            name == "clamp" and any(a.keyword and a.keyword.value == "min" for a in call.args)
        ):
            return True
        if name in ("masked_fill", "masked_fill_", "where"):
            site = fill_site(call, facts)  # the fully masked rows zeroed after the softmax
            if site is not None and selects_fully_masked_rows(site.mask) and constant_value(site.value, facts) == 0:
                return True
    return False


def _torch_function(call: cst.Call) -> str | None:
    """``tril`` for ``torch.tril(...)``, None for a method call on a tensor."""
    func = call.func
    if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "torch":
        return func.attr.value
    return None
