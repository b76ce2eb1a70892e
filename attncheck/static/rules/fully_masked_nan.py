"""ATT303 fully-masked-nan: ``-inf`` fill with no guard against rows with no visible key."""

from __future__ import annotations

import math
import re

import libcst as cst

from attncheck.static.engine import FileContext
from attncheck.static.facts import FileFacts, FunctionFacts
from attncheck.static.patterns import Tracer, constant_value, fill_site, method_name
from attncheck.static.rule import Invalid, Rule

# Calls that show the function deals with all-masked rows.
_GUARDS = frozenset({"nan_to_num", "nan_to_num_", "isnan", "isfinite", "isinf", "clamp_min", "clamp_min_"})
# A causal mask always leaves the diagonal visible, so no row is fully masked.
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
    )
    INVALID = (
        Invalid(
            "def f(s, mask):\n    s = s.masked_fill(mask == 0, float('-inf'))\n    return s.softmax(-1)",
            line=2,
            message="NaN",
        ),
        Invalid("def f(s, pad):\n    return torch.softmax(s.masked_fill(pad, -float('inf')), -1)", line=2),
        Invalid("def f(s, m):\n    return F.softmax(torch.where(m, s, -torch.inf), dim=-1)", line=2),
        Invalid('def f(s, m):\n    s.masked_fill_(m, float("-inf"))\n    return s.softmax(-1)', line=2),
    )

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self.tracer = Tracer(context.facts)

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

    def _mask_is_causal(self, mask: cst.BaseExpression, fn: FunctionFacts | None) -> bool:
        origin, _ = self.tracer.origin(mask, fn, through=frozenset({"bool", "to", "unsqueeze", "view"}))
        return bool(_CAUSAL.search(self.context.module.code_for_node(origin)))


def _guarded(fn: FunctionFacts | None, facts: FileFacts) -> bool:
    if fn is None:
        return False
    for call in fn.calls:
        name = method_name(call) or (facts.canonical(call.func) or "").rsplit(".", 1)[-1]
        if name in _GUARDS or (
            name == "clamp" and any(a.keyword and a.keyword.value == "min" for a in call.args)
        ):
            return True
    return False
