"""What a function does to the attention weights once the softmax has made them.

ATT203 reports a scale or a mask applied to the weights after the softmax (``w /
math.sqrt(d)``, ``p * attn_mask``). ATT201 asks the same question of a pipeline
whose scores reach the softmax unscaled: when the scale is there, applied to the
weights instead, the mistake is its place, which ATT203 names, and the scores are
not reported unscaled as well. Both read it here, through ``of(context)``.
"""

from __future__ import annotations

import re
from typing import Literal

import libcst as cst

from attncheck.static.analysis import semantics
from attncheck.static.analysis.patterns import Tracer, base_name, dim_role, literal_value, tracer
from attncheck.static.context import FileContext
from attncheck.static.facts import FunctionFacts

_SCALE_NAME = re.compile(r"(scal|sqrt|temper|norm_fact|inv_freq|^d_?k$|head_dim|^dh$)", re.IGNORECASE)
_RENORMALISED = re.compile(r"/=?\s*\(?\s*(torch\.sum\(|[\w.\[\]]+\.sum\()")
# A softmax of a parameter is attention (a fragment handed its scores) only under a scores-like
# name: a spline's ``unnormalized_widths`` or a router's ``router_logits`` are not.
_SCORES_NAME = re.compile(r"score|attn|attention|weight|sim|energ|^[swa]$|qk", re.IGNORECASE)
# Multiplying by these after the softmax is legitimate: HF's head_mask, manual dropout.
_LEGIT_FACTOR = re.compile(r"(head|drop|keep_prob)", re.IGNORECASE)

# ``w /= s`` and ``w *= s`` rescale as ``w = w / s`` and ``w = w * s`` do.
_AUGMENTED = {cst.DivideAssign: cst.Divide, cst.MultiplyAssign: cst.Multiply}
_RESCALINGS = (cst.BinaryOperation, cst.AugAssign)
Rescaling = tuple[Literal["scale", "mask"], cst.Call, cst.BaseExpression]  # what, of which softmax, by what


def of(context: FileContext) -> AfterSoftmax:
    """The file's ``AfterSoftmax``, shared by the rules that ask."""
    return context.shared(_build)


def _build(context: FileContext) -> AfterSoftmax:
    # From the context's parts, not the context: it holds the shared analyses, and a cycle
    # through it would keep the file's trees alive in a worker that pauses the collector.
    return AfterSoftmax(semantics.of(context), tracer(context))


class AfterSoftmax:
    """The attention weights of a file's functions, and what rescales them after the softmax."""

    def __init__(self, sem: semantics.Semantics, trace: Tracer) -> None:
        self.sem = sem
        self.tracer = trace
        self._softmax_scopes: dict[int, bool] = {}  # by id of a function or of a class

    def softmax_of(self, node: cst.BaseExpression, fn: FunctionFacts | None) -> cst.Call | None:
        """The softmax call whose attention weights ``node`` (in ``fn``) holds, or None.

        Attention weights: the softmax reads a q·kᵀ product, or scores handed to
        this function as a parameter. A softmax of sampling logits or of a
        router's ``F.linear`` output is no attention.
        """
        if fn is not None and not self._reaches_a_softmax(fn):
            return None
        source, fn = self.tracer.origin(node, fn)
        taken = self.scores_taken(source, fn)
        if taken is None or not isinstance(source, cst.Call):
            return None
        if self.sem.reaches_product(taken, fn):
            return source
        origin, _ = self.tracer.origin(taken, fn)
        handed_in = isinstance(origin, cst.Name) and fn is not None and origin.value in fn.params
        return source if handed_in and _SCORES_NAME.search(origin.value) else None

    def scores_taken(self, node: cst.BaseExpression, fn: FunctionFacts | None) -> cst.BaseExpression | None:
        """The scores ``node`` takes the softmax of, else None."""
        softmax = self.sem.softmax(node, fn) if type(node) is cst.Call else None
        return softmax.input if softmax is not None else None

    def rescaling(self, node: cst.BinaryOperation | cst.AugAssign, fn: FunctionFacts | None) -> Rescaling | None:
        """What ``node`` does to attention weights, when it rescales them by a scale (``w /
        math.sqrt(d)``, ``w * self.scale``, ``w /= math.sqrt(d)``) or masks them by multiplying
        (``p * attn_mask``), with no renormalisation after: the softmax and the factor. A
        division by a sum is a renormalisation; a head mask or a dropout keep is no mistake."""
        if type(node) is cst.AugAssign:
            operator, left, right = _AUGMENTED.get(type(node.operator)), node.target, node.value
        else:
            operator, left, right = type(node.operator), node.left, node.right
        if operator is cst.Divide:
            softmax = self.softmax_of(left, fn)
            if softmax is None or "sum" in self.sem.module.code_for_node(right):
                return None
            return "scale", softmax, right
        if operator is not cst.Multiply:
            return None
        if not (self._may_rescale(left) or self._may_rescale(right)):
            return None  # no side is a factor worth reporting: which side holds weights does not matter
        for weights, factor in ((left, right), (right, left)):
            softmax = self.softmax_of(weights, fn)
            if softmax is None:
                continue
            name = base_name(factor) or ""
            if _LEGIT_FACTOR.search(name) or self.renormalised(fn):
                return None
            if "mask" in name.lower():
                return "mask", softmax, factor
            return ("scale", softmax, factor) if self.is_scale(factor) else None
        return None

    def rescaled_by_a_scale(self, softmax: cst.Call, fn: FunctionFacts) -> bool:
        """Whether ``fn`` rescales the weights of ``softmax`` by a scale after it."""
        return any(
            type(node) in _RESCALINGS and (found := self.rescaling(node, fn)) is not None
            and found[0] == "scale" and found[1] is softmax
            for node in fn.preorder.nodes
        )

    def renormalised(self, fn: FunctionFacts | None) -> bool:
        """Whether ``fn`` divides something by a sum: weights made to sum to 1 again."""
        return fn is not None and bool(_RENORMALISED.search(self.sem.module.code_for_node(fn.node)))

    def is_scale(self, node: cst.BaseExpression) -> bool:
        """A constant, a square root, or a scale-named quantity, alone or in arithmetic
        (``1 / math.sqrt(d)``); ``1 + g - g_mass`` (a watermark's reweighting) is no scale."""
        facts = self.sem.facts
        if literal_value(node, facts) is not None:
            return True
        if isinstance(node, cst.BinaryOperation):
            sides = (node.left, node.right)
            return any(self.is_scale(side) for side in sides if literal_value(side, facts) is None)
        if isinstance(node, cst.Call):
            return (facts.canonical(node.func) or "").endswith("sqrt")
        name = base_name(node) or ""
        return bool(_SCALE_NAME.search(name)) or dim_role(node) in ("head_dim", "model")

    def _may_rescale(self, factor: cst.BaseExpression) -> bool:
        """A factor that, multiplied into the attention weights, is a mistake: a mask or a scale."""
        name = base_name(factor) or ""
        return not _LEGIT_FACTOR.search(name) and ("mask" in name.lower() or self.is_scale(factor))

    def _reaches_a_softmax(self, fn: FunctionFacts) -> bool:
        """Whether a value in ``fn`` can come from a softmax: the tracer follows names within
        ``fn`` and ``self.`` attributes into the methods of its class, so one of their calls
        must be one. Most functions have none, and need not be traced at all."""
        if self._calls_a_softmax(fn):
            return True
        owner = fn.owner
        if owner is None:
            return False
        found = self._softmax_scopes.get(id(owner))
        if found is None:
            found = self._softmax_scopes[id(owner)] = any(map(self._calls_a_softmax, owner.methods.values()))
        return found

    def _calls_a_softmax(self, fn: FunctionFacts) -> bool:
        found = self._softmax_scopes.get(id(fn))
        if found is None:
            found = self._softmax_scopes[id(fn)] = any(self.scores_taken(c, fn) is not None for c in fn.calls)
        return found
