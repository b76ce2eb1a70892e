"""ATT302 mask-fill-value: a fill value that overflows float16 or that masks nothing."""

from __future__ import annotations

import math

import libcst as cst

from attncheck.findings import Edit
from attncheck.static import edits
from attncheck.static.analysis import semantics
from attncheck.static.analysis.flow import reaching
from attncheck.static.analysis.patterns import (
    FLOAT16_MIN,
    FillSite,
    argument,
    constant_value,
    fill_site,
    looks_like_scores,
    method_name,
    tracer,
)
from attncheck.static.context import FileContext
from attncheck.static.facts import FileFacts, dotted_name
from attncheck.static.rule import Invalid, Rule

_WIDE_FLOATS = frozenset({"torch.float32", "torch.float", "torch.float64", "torch.double"})
# Negative values closer to zero than this remove nothing from a softmax.
_NEGLIGIBLE = 1e-3


class MaskFillValue(Rule):
    code = "ATT302"
    PREFILTER = ("masked_fill", "where")
    VALID = (
        "scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)",
        "scores = scores.masked_fill(mask == 0, -1e4)",
        "scores = scores.masked_fill(mask == 0, -65504.0)",
        "scores = torch.where(mask, scores, -10000.0)",
        "lengths = lengths.masked_fill(pad, 1)",
        "x = x.masked_fill(pad.unsqueeze(-1), 0.0)",
        # a fully masked row's probabilities zeroed after the softmax: a guard, not a mask
        "import torch\ndef f(scores, mask):\n    attn = torch.softmax(scores.masked_fill(~mask, -1e4), dim=-1)\n"
        "    return attn.masked_fill(~mask.any(-1, keepdim=True), 0.0)",
        # EoMT: a float32 additive mask; adding it to half scores promotes to float32.
        "attention_mask = attention_mask.float().masked_fill(~attention_mask, -1e9)",
        "bias = mask.to(torch.float32).masked_fill(~mask, -1e9)",
    )
    INVALID = (
        Invalid("scores = scores.masked_fill(mask == 0, -1e9)", line=1, message="float16",
                fixed="import torch\nscores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)"),
        Invalid("att = att.masked_fill(mask, -1e-9)", line=1, message="nothing"),
        Invalid("scores = scores.masked_fill(mask == 0, float('inf'))", line=1, message="positive"),
        Invalid("def f(s, m):\n    neg = -1e10\n    return torch.where(m, s, neg)", line=3),
        Invalid("scores.masked_fill_(~mask, -1e20)", line=1),
        Invalid("w = torch.masked_fill(attn_logits, pad, 1e9)", line=1, message="positive"),
        Invalid("scores = scores.half().masked_fill(mask == 0, -1e9)", line=1, message="float16"),
        Invalid("import torch\ndef f(scores, mask):\n    scores = scores.masked_fill(mask == 0, 0.0)\n"
                "    return torch.softmax(scores, dim=-1)", line=3, message="exp(0) = 1"),
        Invalid(  # in place: the softmax below reads the filled scores
            "import torch\ndef f(scores, mask):\n    scores.masked_fill_(~mask, 0)\n    return scores.softmax(-1)",
            line=3,
            message="is zero",
        ),
    )

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self.tracer = tracer(context)

    def visit_Call(self, node: cst.Call) -> None:
        facts = self.context.facts
        site = fill_site(node, facts)
        if site is None:
            site = self._with_named_value(node)
        if site is None:
            return
        value_node, _ = self.tracer.origin(site.value, self.context.function, through=frozenset())
        value = constant_value(value_node, facts)
        if value is None or math.isnan(value):
            return
        problem = _problem(value, site, facts, float32=self._explicit_float32(site))
        if problem is None and value == 0 and self._feeds_softmax(node, site):
            problem = "is zero on scores a softmax then takes: exp(0) = 1, so the masked keys keep their weight"
        if problem is None:
            return
        shown = self.context.module.code_for_node(site.value)
        self.report(
            node,
            f"fill value `{shown}` {problem}",
            hint="fill with torch.finfo(scores.dtype).min (or -1e4, which float16 can hold)",
            evidence=[f"fill value: {shown} = {value:g}"],
            fix=self._fix(site),
        )

    def _feeds_softmax(self, node: cst.Call, site: FillSite) -> bool:
        """The filled tensor is scores (by name or as a product) and the fill's result reaches a
        softmax of the same function: zeroing probabilities after the softmax is a legitimate guard."""
        fn = self.context.function
        if fn is None or site.target is None or not looks_like_scores(site.target, self.context.facts):
            return False
        sem = semantics.of(self.context)
        # ``scores.masked_fill_(m, 0)`` changes ``scores`` in place: a later softmax of that name reads it
        in_place = method_name(node) == "masked_fill_" and type(site.target) is cst.Name
        flow = self.tracer.flow(fn)
        for call in fn.calls:
            softmax = sem.softmax(call, fn)
            if softmax is None:
                continue
            lineage = reaching(softmax.input, fn)
            if any(reached is node for reached in lineage) or (
                in_place
                and flow.is_after(call, node)
                and any(type(n) is cst.Name and n.value == site.target.value for n in lineage)
            ):
                return True
        return False

    def _explicit_float32(self, site: FillSite) -> bool:
        """The filled tensor was just made float32/float64 (``mask.float().masked_fill(~mask, -1e9)``):
        the value fits whatever the model's dtype; adding it to half scores promotes to float32."""
        if site.target is None:
            return False
        target, _ = self.tracer.origin(site.target, self.context.function, through=frozenset())
        if not isinstance(target, cst.Call) or not isinstance(target.func, cst.Attribute):
            return False
        method = target.func.attr.value
        if method in ("float", "double"):
            return not target.args
        dtype = argument(target, 0, "dtype") if method == "to" else None
        return dtype is not None and self.context.facts.canonical(dtype) in _WIDE_FLOATS

    def _with_named_value(self, node: cst.Call) -> FillSite | None:
        """``torch.where(m, s, neg)`` where ``neg`` is a local constant."""
        if self.context.facts.canonical(node.func) != "torch.where" or len(node.args) != 3:
            return None
        condition, chosen, other = (a.value for a in node.args)
        value, _ = self.tracer.origin(other, self.context.function, through=frozenset())
        if other is value or constant_value(value, self.context.facts) is None:
            return None
        return FillSite(node, chosen, condition, other, False)

    def _fix(self, site: FillSite) -> tuple[Edit, ...]:
        """The inline literal becomes ``torch.finfo(SCORES.dtype).min``.

        Only for a plain-name or attribute target and an inline value (a named
        constant is fixed where it is defined); ``import torch`` is added when
        no top-level import binds ``torch`` (``import torch.nn as nn`` does not).
        """
        target = dotted_name(site.target) if site.target is not None else None
        if target is None or constant_value(site.value, self.context.facts) is None:
            return ()
        torch = edits.module_name(self, "torch")
        if torch is None:
            return ()
        name, imports = torch
        return edits.complete(edits.replace(self, site.value, f"{name}.finfo({target}.dtype).min"), *imports)


def _problem(value: float, site: FillSite, facts: FileFacts, float32: bool = False) -> str | None:
    """Why ``value`` is a wrong fill for masked attention scores, or None (``float32``: the
    filled tensor is explicitly float32 or wider, so no float16 overflow)."""
    if math.isinf(value) and value < 0:
        return None
    if value < FLOAT16_MIN and not float32:
        return (
            "overflows float16 (whose most negative value is -65504): in half precision masked_fill "
            "raises 'value cannot be converted to type c10::Half without overflow'"
        )
    if -_NEGLIGIBLE < value < 0:
        return "is so close to zero that the masked keys keep almost their full weight: it masks nothing"
    if value > 0 and site.target is not None and looks_like_scores(site.target, facts):
        return (
            "is positive: the masked keys get the largest scores and take all the attention "
            "(a sign error; the fill must be very negative)"
        )
    return None
