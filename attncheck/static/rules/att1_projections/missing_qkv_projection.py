"""ATT101 missing-qkv-projection: heads are split from raw inputs, not from learned projections."""

from __future__ import annotations

import re

import libcst as cst

from attncheck.findings import Severity
from attncheck.static.analysis import semantics
from attncheck.static.analysis.syntax import projection_role
from attncheck.static.facts import ClassFacts
from attncheck.static.rule import Invalid, Rule

_HINT = (
    "project before splitting: q = self.q_proj(query).view(b, s, h, dh).transpose(1, 2), and likewise k, v"
)
# Inputs that are reshaped for bookkeeping, not attended over.
_NOT_DATA = re.compile(r"mask|pos|bias|cache|past|rotary|cos|sin|freq|ids|len", re.I)

_CLASS = """
import math, torch, torch.nn as nn, torch.nn.functional as F
class Attention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.h, self.dh = num_heads, d_model // num_heads
        {init}
    def forward(self, x):
        b, s, d = x.shape
        {body}
        out = F.scaled_dot_product_attention(q, k, v)
        return self.out_proj(out.transpose(1, 2).reshape(b, s, d))
"""


def _cls(init: str, body: str) -> str:
    init = init + "\n        self.out_proj = nn.Linear(d_model, d_model)"
    return _CLASS.replace("{init}", init).replace("{body}", body)


_SEPARATE = (
    "self.q = nn.Linear(d_model, d_model)\n        self.k = nn.Linear(d_model, d_model)\n"
    "        self.v = nn.Linear(d_model, d_model)"
)
_SPLIT = "{} = {}.view(b, s, self.h, self.dh).transpose(1, 2)"


class MissingQkvProjection(Rule):
    code = "ATT101"
    PREFILTER = ("view", "reshape", "rearrange", "unflatten")
    VALID = (
        _cls(_SEPARATE, "\n        ".join(_SPLIT.format(n, f"self.{n}(x)") for n in "qkv")),
        _cls(
            "self.qkv = nn.Linear(d_model, 3 * d_model)",
            "q, k, v = self.qkv(x).reshape(b, s, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)",
        ),
        _cls(
            "self.in_proj_weight = nn.Parameter(torch.empty(3 * d_model, d_model))",
            "q, k, v = F.linear(x, self.in_proj_weight).chunk(3, dim=-1)\n        "
            + "\n        ".join(_SPLIT.format(n, n) for n in "qkv"),
        ),
        _cls(
            "self.c_attn = nn.Conv1d(d_model, 3 * d_model, 1)",
            "qkv = self.c_attn(x.transpose(1, 2)).transpose(1, 2)\n        "
            "q, k, v = qkv.reshape(b, s, 3, self.h, self.dh).unbind(2)\n        "
            "q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)",
        ),
        "import torch\ndef attention(q, k, v, h):\n    b, s, d = q.shape\n"
        "    q = q.view(b, s, h, d // h).transpose(1, 2)\n    return q",
    )
    INVALID = (
        Invalid(
            _cls(_SEPARATE, "\n        ".join(_SPLIT.format(n, "x") for n in "qkv")),
            line=13,
            message="self.q",
        ),
        Invalid(
            _cls(
                _SEPARATE,
                "q = self.q(x)\n        q = x.reshape(b, s, self.h, self.dh).transpose(1, 2)\n"
                "        k = v = q",
            ),
            line=14,
        ),
        Invalid(
            _cls(
                "",
                "from einops import rearrange\n        "
                "q = k = v = rearrange(x, 'b s (h d) -> b h s d', h=self.h)",
            ),
            line=12,
            severity=Severity.WARNING,
        ),
        Invalid(  # the raw split reaches q·kᵀ and the softmax: q and k are the input itself
            "import torch, torch.nn as nn\nclass Attention(nn.Module):\n"
            "    def __init__(self, d, h):\n        super().__init__()\n        self.h, self.q = h, nn.Linear(d, d)\n"
            "    def forward(self, x):\n        b, s, d = x.shape\n"
            "        q = x.view(b, s, self.h, d // self.h).transpose(1, 2)\n"
            "        w = torch.softmax(q @ q.transpose(-2, -1) / (d // self.h) ** 0.5, dim=-1)\n"
            "        return (w @ q).transpose(1, 2).reshape(b, s, d)",
            line=8,
            message="self.q",
        ),
    )

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        klass = self.context.klass
        forward = klass.methods.get("forward") if klass is not None else None
        if klass is None or forward is None:
            return
        sem = semantics.of(self.context)
        raw_splits = []
        for call, tensor in sem.splits(forward):
            # A split of projected states (most are) is settled without the walk of forward's
            # q, k and v lineage that ``feeds_attention`` builds.
            projected, raw = sem.provenance(tensor, forward)
            data = [name for name in raw if not _NOT_DATA.search(name)]
            if projected or not data:
                continue
            if sem.feeds_attention(call, forward):  # not a patchify, a feature reshape, states projected later
                raw_splits.append((call, data))
        if not raw_splits:
            return
        inputs = sorted({name for _, names in raw_splits for name in names})
        unused = _unused_projections(sem, klass)
        message = (
            f"{', '.join(inputs)} {'is' if len(inputs) == 1 else 'are'} split into heads without a learned "
            "Q/K/V projection"
        )
        if unused:
            shown = ", ".join(f"self.{a}" for a in unused)
            message += f"; {shown} {'is' if len(unused) == 1 else 'are'} defined but forward never calls them"
        self.report(
            raw_splits[0][0],
            message,
            hint=_HINT,
            severity=None if unused else Severity.WARNING,
            evidence=[sem.code(call) for call, _ in raw_splits],
        )


def _unused_projections(sem: semantics.Semantics, klass: ClassFacts) -> list[str]:
    return [
        attr
        for attr in klass.attributes
        if projection_role(attr) in {"q", "k", "v", "qkv", "kv"}
        and "bias" not in attr.lower()  # Transformer-XL's pos_bias_v is added to q, not a projection
        and sem.is_projection_module(klass, attr)
        and sem.module_kind(klass, attr) is not None
        and not sem.references_outside_init(klass, attr)
    ]
