"""ATT201 wrong-scale: attention scores must be scaled by 1/sqrt(head_dim), once."""

from __future__ import annotations

from collections import defaultdict

import libcst as cst

from attncheck.findings import Edit, Severity
from attncheck.static.analysis import after_softmax, calls, semantics, syntax
from attncheck.static.analysis.results import Factor, Pipeline, Term
from attncheck.static.analysis.syntax import DESCRIPTION
from attncheck.static.context import FileContext
from attncheck.static.facts import FunctionFacts
from attncheck.static.rule import Invalid, Rule
from attncheck.static.rules.att2_scores import scale_conventions, scale_fixes
from attncheck.static.rules.att2_scores.scale_conventions import root_name

_HINT = "scale the scores by 1/sqrt(head_dim): scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)"

_MHA = """
import math, torch, torch.nn as nn, torch.nn.functional as F
class MHA(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        {line}
        return self.out((F.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, C))
"""


def _mha(line: str) -> str:
    return _MHA.replace("{line}", line)


class WrongScale(Rule):
    code = "ATT201"
    PREFILTER = ("softmax", "Softmax", "scaled_dot_product_attention")
    VALID = (
        _mha("s = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)"),
        _mha("s = torch.matmul(q, k.transpose(-2, -1)) * self.head_dim ** -0.5"),
        _mha("s = torch.einsum('bhqd,bhkd->bhqk', q * self.head_dim ** -0.5, k)"),
        _mha("s = (q @ k.transpose(-2, -1)).div(math.sqrt(q.size(-1)))"),
        _mha("s = q @ k.transpose(-2, -1) / math.sqrt(C // self.num_heads)"),
        "import torch\ndef attn(q, k, v):\n    q = q * q.shape[-1] ** -0.25\n"
        "    k = k * k.shape[-1] ** -0.25\n"
        "    return torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v",
        "import torch\ndef attn(q, k, v, scale):\n"
        "    return torch.softmax(torch.bmm(q, k.transpose(1, 2)) * scale, -1) @ v",
        # VQ-GAN (Chameleon, Janus, LTX-2 audio): one head over the channels of a (b, c, h, w) map
        "import torch, torch.nn as nn\nclass AttnBlock(nn.Module):\n    def __init__(self, c):\n"
        "        super().__init__()\n        self.q, self.k, self.v = (nn.Conv2d(c, c, 1) for _ in range(3))\n"
        "    def forward(self, x):\n        q, k, v = self.q(x), self.k(x), self.v(x)\n"
        "        batch, channels, height, width = q.shape\n"
        "        q = q.reshape(batch, channels, height * width).permute(0, 2, 1)\n"
        "        k = k.reshape(batch, channels, height * width)\n"
        "        w = torch.softmax(torch.bmm(q, k) * (int(channels) ** (-0.5)), dim=2).permute(0, 2, 1)\n"
        "        v = v.reshape(batch, channels, height * width)\n"
        "        return x + torch.bmm(v, w).reshape(batch, channels, height, width)",
        # LDM's SpatialSelfAttention: the same single head, flattened with einops (issue 20)
        "import torch\nfrom einops import rearrange\ndef spatial(q, k, v):\n    b, c, h, w = q.shape\n"
        "    q = rearrange(q, 'b c h w -> b (h w) c')\n    k = rearrange(k, 'b c h w -> b c (h w)')\n"
        "    w_ = torch.softmax(torch.einsum('bij,bjk->bik', q, k) * (int(c) ** (-0.5)), dim=2)\n"
        "    return torch.einsum('bij,bkj->bik', rearrange(v, 'b c h w -> b c (h w)'), w_)",
        # a pre-scaled q given to SDPA with a unit scale: scaled once
        "import torch.nn.functional as F\ndef attn(q, k, v, head_dim):\n    q = q * head_dim ** -0.5\n"
        "    return F.scaled_dot_product_attention(q, k, v, scale=1.0)",
        # EfficientLoFTR: dual-softmax feature matching, both features divided by sqrt(C)
        "import torch\ndef fine_matching(f0, f1):\n    f0 = f0 / f0.shape[-1] ** 0.5\n"
        "    f1 = f1 / f1.shape[-1] ** 0.5\n    sim = f0 @ f1.transpose(-1, -2)\n"
        "    return torch.softmax(sim, 1) * torch.softmax(sim, 2)",
    )
    INVALID = (
        Invalid(  # q pre-scaled, then the file's eager function scales the scores again
            "import torch\ndef eager(module, query, key, value, scaling):\n"
            "    return torch.softmax(query @ key.transpose(2, 3) * scaling, dim=-1) @ value\n"
            "class A:\n    def __init__(self, d, h):\n        self.head_dim = d // h\n"
            "        self.scaling = self.head_dim ** -0.5\n"
            "    def forward(self, q, k, v):\n        q = q * self.scaling\n"
            "        return eager(self, q, k, v, scaling=self.scaling)",
            line=9,
            message="scaled twice",
        ),
        Invalid(  # the model width, under another name, handed to the file's eager function as its scale
            "import torch\ndef eager(module, query, key, value, scaling):\n"
            "    return torch.softmax(query @ key.transpose(2, 3) * scaling, dim=-1) @ value\n"
            "class A:\n    def __init__(self, config):\n        self.feats = config.hidden_size\n"
            "        self.head_dim = self.feats // config.num_attention_heads\n"
            "        self.scaling = self.feats ** -0.5\n"
            "    def forward(self, q, k, v):\n        return eager(self, q, k, v, self.scaling)",
            line=10,
            message="through its `scaling` argument",
        ),
        Invalid(  # a function dividing by sqrt of its width argument, given the model width by its caller
            "import math, torch\ndef attention(q, k, v, dim):\n"
            "    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dim), dim=-1) @ v\n"
            + _mha("s = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)").replace(
                "return self.out(", "o = attention(q, k, v, C)\n        return self.out("),
            line=16,
            message="through its `dim` argument",
        ),
        Invalid(_mha("s = q @ k.transpose(-2, -1) / math.sqrt(T)"), line=12, message="T = x.shape[1]"),
        Invalid(_mha("s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(C)"), line=12, message="d_model"),
        Invalid(  # channels-first (b, c, t) named so, split into heads: sqrt(channels) is sqrt(d_model)
            "import torch\ndef attn(q, k, heads):\n    batch, channels, seq_len = q.shape\n"
            "    q = q.reshape(batch * heads, channels // heads, seq_len).permute(0, 2, 1)\n"
            "    k = k.reshape(batch * heads, channels // heads, seq_len)\n"
            "    return torch.softmax(torch.bmm(q, k) / channels ** 0.5, dim=-1)",
            line=6,
            message="d_model",
        ),
        Invalid(_mha("s = torch.einsum('bhqd,bhkd->bhqk', q, k)"), line=12, message="unscaled"),
        Invalid(_mha("s = q @ k.transpose(-2, -1) * math.sqrt(self.head_dim)"), message="multiplied"),
        Invalid(
            _mha("s = (q / math.sqrt(self.head_dim)) @ k.transpose(-2, -1) / math.sqrt(self.head_dim)"),
            message="twice",
        ),
        Invalid(  # one arm of the ``if`` scales a second time: that path is wrong
            _mha(
                "s = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)\n        if self.training:\n"
                "            s = s / math.sqrt(self.head_dim)\n        else:\n            s = s.float()"
            ),
            message="twice",
        ),
        Invalid(
            "import torch\ndef attn(q, k, v):\n    w = torch.bmm(q, k.transpose(1, 2))\n"
            "    return torch.softmax(w, dim=-1) @ v",
            line=3,
        ),
        Invalid(
            "import torch\ndef attn(q, k, v):\n    '''T5-style attention: no scaling, folded into init.'''\n"
            "    return torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v",
            severity=Severity.WARNING,
        ),
        Invalid(  # LongT5: a T5 relative attention bias, the scale folded into the initialisation
            _mha("s = q @ k.transpose(-2, -1)").replace(
                "self.qkv = nn.Linear", "self.has_relative_attention_bias = True\n        self.qkv = nn.Linear"
            ),
            severity=Severity.WARNING,
            message="has_relative_attention_bias",
        ),
        Invalid(  # GPT-Neo: its flash subclass passes softmax_scale=1.0, trained unscaled
            _mha("s = q @ k.transpose(-2, -1)")
            + "class MHAFlash(MHA):\n    def forward(self, q, k, v):\n"
            "        return flash_attn_func(q, k, v, softmax_scale=1.0)\n",
            severity=Severity.WARNING,
            message="softmax_scale=1.0",
        ),
        Invalid(  # unbound from the last axis of (b, s, h, d, 3): full heads, still unscaled
            _mha("s = q @ k.transpose(-2, -1)").replace(
                "q, k, v = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)",
                "q, k, v = self.qkv(x).view(B, T, self.num_heads, self.head_dim, 3).unbind(-1)",
            ),
            message="unscaled",
        ),
        Invalid(  # q pre-scaled, then SDPA's default scale: twice
            "import torch.nn.functional as F\ndef attn(q, k, v, head_dim):\n    q = q * head_dim ** -0.5\n"
            "    return F.scaled_dot_product_attention(q, k, v)",
            line=3,
            message="scaled twice",
        ),
        Invalid(  # Persson's: the width under its own name, an einsum given a list of operands
            _mha("s = torch.einsum('bhqd,bhkd->bhqk', [q, k]) / (C ** (1 / 2))"), line=12, message="d_model"
        ),
        Invalid(  # a unit scale in an unrelated class of the file is no evidence
            _mha("s = q @ k.transpose(-2, -1)")
            + "class Other(nn.Module):\n    def forward(self, q, k, v):\n"
            "        return F.scaled_dot_product_attention(q, k, v, scale=1.0)\n",
            severity=Severity.ERROR,
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        sem = semantics.of(self.context)
        fn = self.context.function
        softmax = sem.softmax(node, fn)
        if softmax is None:
            if fn is not None and syntax.is_sdpa_call(self.context, node):
                self._judge_prescaled_query(node, sem, fn)
            elif fn is not None and type(node.func) is cst.Name:
                self._judge_own_eager_function(node, sem, fn)
            return
        pipeline = sem.pipeline(softmax, fn)
        if pipeline is None or not pipeline.products or sem.dual_softmax(softmax, fn):
            return  # a dual softmax matches features (LoFTR): its temperature is its own
        if scale_conventions.contracts_tokens(sem, pipeline) or scale_conventions.one_wide_features(sem, pipeline):
            return
        operands = frozenset(filter(None, (root_name(o) for o in pipeline.operands)))
        terms = [
            (factor, term)
            for factor in pipeline.factors
            for term in sem.terms(factor.value, factor.fn, -1.0 if factor.divides else 1.0, operands)
        ]
        self._judge(pipeline, terms, sem)

    def _judge_prescaled_query(self, node: cst.Call, sem: semantics.Semantics, fn: FunctionFacts) -> None:
        """SDPA with its default scale, given a q already divided by a width: scaled twice."""
        query = next(iter(syntax.positional(node)), None) or syntax.keyword(node, "query")
        if query is None or syntax.keyword(node, "scale") is not None:
            return
        self._report_prescaled(
            query,
            sem,
            fn,
            "scaled_dot_product_attention, which divides by sqrt(head_dim) again by default",
            hint="drop the scaling of q, or pass scale=1.0 to scaled_dot_product_attention",
        )

    def _judge_own_eager_function(self, node: cst.Call, sem: semantics.Semantics, fn: FunctionFacts) -> None:
        """A function of this file that multiplies its scores by a ``scaling`` parameter, called
        with a q already scaled by a width and a scaling that is not 1 (HF's
        ``eager_attention_forward(self, query * self.scaling, ..., scaling=self.scaling)``)."""
        callee = self.context.shared(_scaled_functions).get(node.func.value) if type(node.func) is cst.Name else None
        if callee is None:
            return
        function, query_param, scale_param = callee
        query = _argument_for(node, function, query_param)
        scaling = _argument_for(node, function, scale_param)
        if query is None or scaling is None or syntax.number(scaling) == 1 or sem.code(scaling) == "None":
            return
        self._report_prescaled(
            query,
            sem,
            fn,
            f"{function.name}, which multiplies the scores by its `{scale_param}` argument "
            f"`{sem.code(scaling)}` again",
            hint=f"drop the scaling of q, or pass {scale_param}=1.0",
        )

    def _report_prescaled(
        self, query: cst.BaseExpression, sem: semantics.Semantics, fn: FunctionFacts, reaches: str, hint: str
    ) -> None:
        """Report the width q is already scaled by, if any, where it then ``reaches`` a second scale."""
        found = _prescaled_by_width(query, sem, fn)
        if found is not None:
            factor, term = found
            self.report(
                factor.node,
                f"q is already {'divided' if factor.divides else 'multiplied'} by {sem.code(factor.value)} "
                f"({term.evidence}) when it reaches {reaches}: the scores are scaled twice",
                hint=hint,
            )

    def _judge(self, pipeline: Pipeline, terms: list, sem: semantics.Semantics) -> None:
        heads = sem.has_heads(pipeline.fn)
        powers: dict[str, float] = defaultdict(float)
        by_kind: dict[str, list] = defaultdict(list)
        for factor, term in terms:
            kind = term.kind if heads or term.kind != "d_model" else "head_dim"
            powers[kind] += term.power
            by_kind[kind].append((factor, term))
        for kind in ("seq_len", "d_model", "num_heads", "batch"):
            if abs(powers[kind]) > 1e-9:
                factor, term = by_kind[kind][0]
                where = "multiplied by" if term.power > 0 else "divided by"
                self._flag(
                    factor.node,
                    pipeline,
                    f"scores {where} {_root(term)}, where {term.evidence} is {DESCRIPTION[kind]}; "
                    "scale by 1/sqrt(head_dim)",
                    fix=scale_fixes.replace_factor(self, sem, pipeline, factor),
                )
                return
        # a parameter is what the callers pass: unknown here, or a width read as head_dim for lack of heads
        passed = [term for _, term in by_kind[None]] + [
            term for _, term in terms if term.kind == "d_model" and not heads and term.evidence in pipeline.fn.params
        ]
        if passed:
            self._judge_passed_scale(pipeline, passed, sem)
        if by_kind[None] or by_kind["const"] or pipeline.scale_argument:
            return
        self._judge_head_dim(pipeline, powers["head_dim"], by_kind["head_dim"])

    def _judge_passed_scale(self, pipeline: Pipeline, unknown: list[Term], sem: semantics.Semantics) -> None:
        """A scale that is a parameter of the attention function (HF's ``eager_attention_forward(...,
        scaling)``, ``attention(q, k, v, dim)`` dividing by ``math.sqrt(dim)``) is what its callers in
        the file pass: ``self.scaling = self.feats ** -0.5`` with ``self.feats = config.hidden_size``
        scales by the model width, whatever the names."""
        for term in unknown:
            param = term.evidence
            if param not in pipeline.fn.params:
                continue
            for argument, caller in calls.passed(pipeline.fn, param, sem.facts):
                heads = sem.has_heads(pipeline.fn) or sem.has_heads(caller)
                for passed in sem.terms(argument, caller, term.power):
                    if passed.kind in ("seq_len", "d_model", "num_heads") and (heads or passed.kind != "d_model"):
                        where = "multiplied by" if passed.power > 0 else "divided by"
                        self.report(
                            argument,
                            f"scores in {pipeline.fn.name} are {where} {_root(passed)} through its "
                            f"`{param}` argument `{sem.code(argument)}`, where {passed.evidence} "
                            f"is {DESCRIPTION[passed.kind]}; scale by 1/sqrt(head_dim)",
                            hint=_HINT,
                        )
                        return

    def _judge_head_dim(self, pipeline: Pipeline, power: float, found: list) -> None:
        if abs(power + 0.5) < 1e-9:
            return
        if not found:
            sem = semantics.of(self.context)
            if scale_conventions.scaled_by_caller(sem, pipeline, self.context.source.text):
                return
            if after_softmax.of(self.context).rescaled_by_a_scale(pipeline.softmax.call, pipeline.fn):
                return  # the scale is there, after the softmax: ATT203 names that mistake
            design = scale_conventions.unscaled_by_design(sem, pipeline, self.context.source.text)
            self._flag(
                pipeline.products[0],
                pipeline,
                "scores q·kᵀ reach the softmax unscaled"
                + (f" ({design})" if design else "")
                + "; without 1/sqrt(head_dim) the softmax saturates as head_dim grows",
                severity=Severity.WARNING if design else None,
                fix=() if design else scale_fixes.add_scale(self, sem, pipeline),
                by_design=design is not None,
            )
            return
        factor, term = found[0]
        fix = scale_fixes.replace_factor(self, semantics.of(self.context), pipeline, factor)
        if abs(power - 0.5) < 1e-9:
            message = f"scores multiplied by sqrt({term.evidence}) instead of divided"
        elif abs(power + 1) < 1e-9 and len(found) > 1:
            message = (
                f"scores scaled by 1/sqrt(head_dim) twice ({len(found)} factors), i.e. by 1/{term.evidence}"
            )
            fix = scale_fixes.drop_repeated_factor(self, pipeline, [t for _, t in found])
        else:
            message = f"scores scaled by head_dim ** {power:g} ({term.evidence}) instead of head_dim ** -0.5"
        self._flag(factor.node, pipeline, message, fix=fix)

    def _flag(
        self,
        node: cst.CSTNode,
        pipeline: Pipeline,
        message: str,
        severity: Severity | None = None,
        fix: tuple[Edit, ...] = (),
        by_design: bool = False,
    ) -> None:
        anchor = syntax.located(self, node, pipeline.products[0], pipeline.softmax.call)
        self.report(anchor, message, severity=severity, hint=_HINT, fix=fix, by_design=by_design)


def _root(term: Term) -> str:
    name = term.evidence.split(" = ")[0]
    return f"sqrt({name})" if abs(abs(term.power) - 0.5) < 1e-9 else f"{name} ** {abs(term.power):g}"


_SCALE_PARAMS = ("scaling", "scale", "softmax_scale", "sm_scale")
_QUERY_PARAMS = ("query", "q", "query_states", "queries")


def _prescaled_by_width(
    query: cst.BaseExpression, sem: semantics.Semantics, fn: FunctionFacts
) -> tuple[Factor, Term] | None:
    """The factor that divides q by a width (head_dim or d_model) on its way here, when every
    factor on q is such a known width (a constant or an unknown factor may be a deliberate scale)."""
    factors, scale_argument = sem.factors_on(query, fn)
    terms = [
        (factor, term)
        for factor in factors
        for term in sem.terms(factor.value, factor.fn, -1.0 if factor.divides else 1.0)
    ]
    if scale_argument or not terms or any(term.kind in (None, "const") for _, term in terms):
        return None
    widths = [(factor, term) for factor, term in terms if term.kind in ("head_dim", "d_model")]
    return widths[0] if widths and sum(term.power for _, term in widths) < 0 else None


def _scaled_functions(context: FileContext) -> dict[str, tuple[FunctionFacts, str, str]]:
    """The module-level functions of the file that take a query and a scale parameter and
    multiply their scores by it: ``{name: (function, query parameter, scale parameter)}``."""
    sem = semantics.of(context)
    found = {}
    for function in context.facts.functions:
        if function.owner is not None:
            continue
        query = next((p for p in function.params if p in _QUERY_PARAMS), None)
        scale = next((p for p in function.params if p in _SCALE_PARAMS), None)
        if query is None or scale is None:
            continue
        for call in function.calls:
            softmax = sem.softmax(call, function)
            pipeline = sem.pipeline(softmax, function) if softmax is not None else None
            if pipeline is not None and any(
                type(f.value) is cst.Name and f.value.value == scale for f in pipeline.factors
            ):
                found[function.name] = (function, query, scale)
                break
    return found


def _argument_for(call: cst.Call, function: FunctionFacts, param: str) -> cst.BaseExpression | None:
    """What ``call`` passes for ``function``'s parameter ``param``, by keyword or position."""
    given = syntax.keyword(call, param)
    if given is not None:
        return given
    index = function.params.index(param)
    positional = syntax.positional(call)
    return positional[index] if index < len(positional) else None
