"""ATT203 softmax-order: scale or mask applied after the softmax instead of before it."""

from __future__ import annotations

import re

import libcst as cst

from attncheck.static.analysis import semantics
from attncheck.static.analysis.patterns import (
    base_name,
    constant_value,
    dim_role,
    fill_site,
    is_query_row_mask,
    literal_value,
    tracer,
)
from attncheck.static.context import FileContext
from attncheck.static.facts import FunctionFacts
from attncheck.static.rule import Invalid, Rule

_SCALE_NAME = re.compile(r"(scal|sqrt|temper|norm_fact|inv_freq|^d_?k$|head_dim|^dh$)", re.IGNORECASE)
_RENORMALISED = re.compile(r"/=?\s*\(?\s*(torch\.sum\(|[\w.\[\]]+\.sum\()")
# A softmax of a parameter is attention (a fragment handed its scores) only under a scores-like
# name: a spline's ``unnormalized_widths`` or a router's ``router_logits`` are not.
_SCORES_NAME = re.compile(r"score|attn|attention|weight|sim|energ|^[swa]$|qk", re.IGNORECASE)
# Multiplying by these after the softmax is legitimate: HF's head_mask, manual dropout.
_LEGIT_FACTOR = re.compile(r"(head|drop|keep_prob)", re.IGNORECASE)


class SoftmaxOrder(Rule):
    code = "ATT203"
    PREFILTER = ("softmax",)
    VALID = (
        "def f(q, k, mask):\n    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))\n"
        "    s = s.masked_fill(mask == 0, -1e4)\n    return F.softmax(s, dim=-1)",
        "def f(s, mask):\n    w = torch.softmax(s, -1) * mask\n    return w / w.sum(-1, keepdim=True)",
        "def f(self, s, head_mask):\n    w = s.softmax(-1)\n    return w * head_mask",
        "def f(s):\n    w = F.softmax(s, dim=-1)\n    return torch.where(torch.isnan(w), 0.0, w)",
        # Epsilon sampling: probabilities pick the logits to drop; no attention anywhere.
        "def f(self, input_ids, scores):\n    probabilities = scores.softmax(dim=-1)\n"
        "    drop = probabilities < self.epsilon\n    return scores.masked_fill(drop, self.filter_value)",
        # An MoE router masks expert groups of its routing probabilities.
        "def f(self, x):\n    scores = F.linear(x, self.weight).softmax(-1)\n"
        "    return scores.masked_fill(~score_mask.bool(), 0.0)",
        # Longformer/LED: padded *queries* get all-zero rows (the mask is broadcast along the keys).
        "def f(q, k, is_index_masked):\n    p = F.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)), dim=-1)\n"
        "    return torch.masked_fill(p, is_index_masked[:, :, None, None], 0.0)",
        # ESPnet (FastSpeech2-Conformer): the same mask blocks the keys before and re-zeroes them after.
        "def f(q, k, m):\n    s = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))\n"
        "    s = s.masked_fill(m, torch.finfo(s.dtype).min)\n"
        "    return torch.softmax(s, dim=-1).masked_fill(m, 0.0)",
        # DeBERTa's XSoftmax, in place.
        "def f(ctx, input, mask, dim):\n    rmask = ~(mask.to(torch.bool))\n"
        "    output = input.masked_fill(rmask, torch.tensor(torch.finfo(input.dtype).min))\n"
        "    output = torch.softmax(output, dim)\n    output.masked_fill_(rmask, 0)\n    return output",
        # Not attention, though a softmax is rescaled or masked after: a spline's bin widths,
        # a watermark's reweighting of sampling probabilities, an MoE router's top-2 choice.
        "def f(unnormalized_widths, min_bin_width, num_bins):\n"
        "    widths = F.softmax(unnormalized_widths, dim=-1)\n"
        "    return min_bin_width + (1 - min_bin_width * num_bins) * widths",
        "def f(scores, g):\n    probs = torch.softmax(scores, dim=1)\n"
        "    return probs * (1 + g - (g * probs).sum(axis=1, keepdims=True))",
        "def f(router_logits, top_2_mask):\n    router_probs = F.softmax(router_logits, dim=-1)\n"
        "    return (router_probs * top_2_mask).sum(dim=1)",
        # ConViT's gated positional self-attention: a gated mix of two softmaxes, renormalised.
        "def f(self, q, k, pos_score, gating):\n    patch = (q @ k.transpose(-2, -1)) * self.scale\n"
        "    patch = patch.softmax(dim=-1)\n"
        "    attn = (1. - torch.sigmoid(gating)) * patch + torch.sigmoid(gating) * pos_score\n"
        "    attn /= attn.sum(dim=-1).unsqueeze(-1)\n    return attn",
    )
    INVALID = (
        Invalid(
            "def f(q, k):\n    w = F.softmax(q @ k.transpose(-2, -1), dim=-1)\n"
            "    return w / math.sqrt(q.size(-1))",
            line=3,
            message="scale",
        ),
        Invalid(
            "def f(self, s):\n    w = torch.softmax(s, dim=-1)\n    w = w * self.scale\n    return w", line=3
        ),
        Invalid(
            "def f(s, mask):\n    w = s.softmax(dim=-1)\n    return w.masked_fill(mask == 0, 0.0)",
            line=3,
            message="renormalis",
        ),
        Invalid("def f(s, attn_mask):\n    p = F.softmax(s, -1)\n    return p * attn_mask", line=3),
        Invalid(
            "def f(q, k, mask):\n    scores = torch.matmul(q, k.mT)\n"
            "    weights = F.softmax(scores, dim=-1)\n"
            "    scores = scores.masked_fill(mask == 0, float('-inf'))\n    return weights",
            line=4,
            message="already taken",
        ),
        Invalid(
            "def f(q, k, m):\n    p = F.softmax(q @ k.transpose(-1, -2), dim=-1)\n"
            "    return p.masked_fill(m[:, None, None, :], 0.0)",
            line=3,
        ),
    )

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self.tracer = tracer(context)
        self._softmax_scopes: dict[int, bool] = {}  # by id of a function or of a class

    def _softmax_of(self, node: cst.BaseExpression) -> cst.Call | None:
        """The softmax call whose attention weights ``node`` holds, or None.

        Attention weights: the softmax reads a q·kᵀ product, or scores handed to
        this function as a parameter. A softmax of sampling logits or of a
        router's ``F.linear`` output is no attention.
        """
        fn = self.context.function
        if fn is not None and not self._reaches_a_softmax(fn):
            return None
        source, fn = self.tracer.origin(node, fn)
        taken = self._scores_taken(source, fn)
        if taken is None or not isinstance(source, cst.Call):
            return None
        if semantics.of(self.context).reaches_product(taken, fn):
            return source
        origin, _ = self.tracer.origin(taken, fn)
        handed_in = isinstance(origin, cst.Name) and fn is not None and origin.value in fn.params
        return source if handed_in and _SCORES_NAME.search(origin.value) else None

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
            found = self._softmax_scopes[id(fn)] = any(self._scores_taken(c, fn) is not None for c in fn.calls)
        return found

    def _scores_taken(self, node: cst.BaseExpression, fn: FunctionFacts | None) -> cst.BaseExpression | None:
        """The scores ``node`` takes the softmax of, else None."""
        softmax = semantics.of(self.context).softmax(node, fn) if type(node) is cst.Call else None
        return softmax.input if softmax is not None else None

    def _is_probabilities(self, node: cst.BaseExpression) -> bool:
        return self._softmax_of(node) is not None

    def _renormalised(self) -> bool:
        fn = self.context.function
        return fn is not None and bool(_RENORMALISED.search(self.context.module.code_for_node(fn.node)))

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if type(node.operator) is cst.Divide and self._is_probabilities(node.left):
            if "sum" not in self.context.module.code_for_node(node.right):
                self._report_scale(node, node.right)
            return
        if not isinstance(node.operator, cst.Multiply) or not (
            self._may_report(node.left) or self._may_report(node.right)
        ):
            return  # no side is a factor worth reporting: which side holds weights does not matter
        for weights, factor in ((node.left, node.right), (node.right, node.left)):
            if not self._is_probabilities(weights):
                continue
            name = base_name(factor) or ""
            if _LEGIT_FACTOR.search(name) or self._renormalised():
                return
            if "mask" in name.lower():
                self._report_mask(node, factor)
            elif self._is_scale(factor):
                self._report_scale(node, factor)
            return

    def _may_report(self, factor: cst.BaseExpression) -> bool:
        """A factor that, multiplied into the attention weights, is reported: a mask or a scale."""
        name = base_name(factor) or ""
        return not _LEGIT_FACTOR.search(name) and ("mask" in name.lower() or self._is_scale(factor))

    def visit_Call(self, node: cst.Call) -> None:
        facts = self.context.facts
        site = fill_site(node, facts)
        if site is None or site.target is None:
            return
        softmax = self._softmax_of(site.target)
        if softmax is not None:
            mask_text = self.context.module.code_for_node(site.mask)
            if (
                constant_value(site.value, facts) == 0
                and "isnan" not in mask_text
                and ".all(" not in mask_text
                and not is_query_row_mask(site.mask)
                and not self._masked_before(softmax, mask_text)
                and not self._renormalised()
            ):
                self._report_mask(node, site.mask)
            return
        self._check_masked_too_late(node, site.target)

    def _masked_before(self, softmax: cst.Call, mask_text: str) -> bool:
        """The same mask already blocked these keys in the scores (ESPnet's and DeBERTa's guard:
        re-zeroing after the softmax keeps the weights summing to 1)."""
        fn = self.context.function
        taken = self._scores_taken(softmax, fn)
        if taken is None:
            return False
        origin, _ = self.tracer.origin(taken, fn)
        earlier = fill_site(origin, self.context.facts) if isinstance(origin, cst.Call) else None
        return earlier is not None and self.context.module.code_for_node(earlier.mask) == mask_text

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if type(node.operator) is cst.AddAssign and "mask" in self.context.module.code_for_node(
            node.value
        ):
            self._check_masked_too_late(node, node.target)

    def _check_masked_too_late(self, node: cst.CSTNode, scores: cst.BaseExpression) -> None:
        fn = self.context.function
        if fn is None or not isinstance(scores, cst.Name):
            return
        flow = self.tracer.flow(fn)
        softmaxes = [(call, self._scores_taken(call, fn)) for call in fn.calls]
        reaches = semantics.of(self.context).reaches_product
        softmaxes = [(call, taken) for call, taken in softmaxes if taken is not None and reaches(taken, fn)]
        if not softmaxes or any(flow.is_after(call, node) for call, _ in softmaxes):
            return
        earlier = [
            call
            for call, taken in softmaxes
            if isinstance(taken, cst.Name) and taken.value == scores.value and flow.is_after(node, call)
        ]
        if not earlier:
            return
        self.report(
            node,
            f"`{scores.value}` is masked after the softmax was already taken from it "
            f"(`{self.context.module.code_for_node(earlier[0])}`): the attention weights never see the mask",
            hint="apply the mask to the scores before the softmax and take the softmax of the masked scores",
            evidence=[f"softmax taken before: {self.context.module.code_for_node(earlier[0])}"],
        )

    def _is_scale(self, node: cst.BaseExpression) -> bool:
        """A constant, a square root, or a scale-named quantity, alone or in arithmetic
        (``1 / math.sqrt(d)``); ``1 + g - g_mass`` (a watermark's reweighting) is no scale."""
        if literal_value(node, self.context.facts) is not None:
            return True
        if isinstance(node, cst.BinaryOperation):
            sides = (node.left, node.right)
            return any(self._is_scale(side) for side in sides if literal_value(side, self.context.facts) is None)
        if isinstance(node, cst.Call):
            return (self.context.facts.canonical(node.func) or "").endswith("sqrt")
        name = base_name(node) or ""
        return bool(_SCALE_NAME.search(name)) or dim_role(node) in ("head_dim", "model")

    def _report_scale(self, node: cst.CSTNode, factor: cst.BaseExpression) -> None:
        shown = self.context.module.code_for_node(factor)
        self.report(
            node,
            f"the attention weights are rescaled by `{shown}` after the softmax: the scale must "
            "sharpen the scores before the softmax, and afterwards the rows no longer sum to 1",
            hint="scale the scores (q @ k.transpose(-2, -1) * scale) and take the softmax of that",
            evidence=[f"post-softmax factor: {shown}"],
        )

    def _report_mask(self, node: cst.CSTNode, mask: cst.BaseExpression) -> None:
        shown = self.context.module.code_for_node(mask)
        self.report(
            node,
            f"the mask `{shown}` is applied after the softmax without renormalising: the "
            "remaining weights no longer sum to 1 and the masked keys' share is simply lost",
            hint="mask the scores before the softmax "
            "(scores.masked_fill(blocked, torch.finfo(scores.dtype).min)), "
            "or divide the masked weights by their row sum",
            evidence=[f"post-softmax mask: {shown}"],
        )

