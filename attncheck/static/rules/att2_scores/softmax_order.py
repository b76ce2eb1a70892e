"""ATT203 softmax-order: scale or mask applied after the softmax instead of before it."""

from __future__ import annotations

import libcst as cst

from attncheck.static.analysis import after_softmax
from attncheck.static.analysis.patterns import constant_value, fill_site, is_query_row_mask
from attncheck.static.context import FileContext
from attncheck.static.rule import Invalid, Rule


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
        self.weights = after_softmax.of(context)

    def _softmax_of(self, node: cst.BaseExpression) -> cst.Call | None:
        return self.weights.softmax_of(node, self.context.function)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        self._check_rescaling(node)

    def _check_rescaling(self, node: cst.BinaryOperation | cst.AugAssign) -> None:
        found = self.weights.rescaling(node, self.context.function)
        if found is None:
            return
        kind, _, factor = found
        if kind == "mask":
            self._report_mask(node, factor)
        else:
            self._report_scale(node, factor)

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
                and not self.weights.renormalised(self.context.function)
            ):
                self._report_mask(node, site.mask)
            return
        self._check_masked_too_late(node, site.target)

    def _masked_before(self, softmax: cst.Call, mask_text: str) -> bool:
        """The same mask already blocked these keys in the scores (ESPnet's and DeBERTa's guard:
        re-zeroing after the softmax keeps the weights summing to 1)."""
        fn = self.context.function
        taken = self.weights.scores_taken(softmax, fn)
        if taken is None:
            return False
        origin, _ = self.weights.tracer.origin(taken, fn)
        earlier = fill_site(origin, self.context.facts) if isinstance(origin, cst.Call) else None
        return earlier is not None and self.context.module.code_for_node(earlier.mask) == mask_text

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if type(node.operator) is cst.AddAssign and "mask" in self.context.module.code_for_node(
            node.value
        ):
            self._check_masked_too_late(node, node.target)
        else:
            self._check_rescaling(node)

    def _check_masked_too_late(self, node: cst.CSTNode, scores: cst.BaseExpression) -> None:
        fn = self.context.function
        if fn is None or not isinstance(scores, cst.Name):
            return
        flow = self.weights.tracer.flow(fn)
        softmaxes = [(call, self.weights.scores_taken(call, fn)) for call in fn.calls]
        reaches = self.weights.sem.reaches_product
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

