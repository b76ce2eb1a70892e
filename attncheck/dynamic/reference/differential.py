"""Differential attention (Ye et al. 2024, "Differential Transformer"; timm's ``DiffAttention``).

Each of h heads owns two query/key heads of width dh and one value head of width 2·dh; its weights are
``softmax(q1 k1ᵀ s) - λ softmax(q2 k2ᵀ s)``, its output is normalised per head by an RMS norm of
width 2·dh (``sub_norm``/``subln``) and scaled by ``1 - λ_init``. λ is the module's own:
``exp(λq1·λk1) - exp(λq2·λk2) + λ_init`` (or ``exp(λa) - exp(λb) + λ_init``, timm's ``dual_lambda``).
The child sends those parameters, ``lambda_init`` and the module's token norms as it reads its weights
(``variant_facts``); :func:`forms` rebuilds the computation from them, so nothing is fitted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from attncheck.dynamic.reference.forms import Mistake, project
from attncheck.dynamic.reference.mha import Projections, merge_heads, split_heads
from attncheck.dynamic.reference.variant_fit import normalise

LAMBDAS = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2", "lambda_a", "lambda_b")
"""The parameters λ is made of, sent by the child under ``declared/<name>`` (``variant_facts.LAMBDAS``)."""


@dataclass(frozen=True)
class Norm:
    """One of the module's token norms, as the child described it."""

    name: str
    fact: Mapping[str, Any]
    weight: torch.Tensor
    bias: torch.Tensor | None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return normalise(x, self.fact, self.weight, self.bias)


@dataclass(frozen=True)
class Differential:
    """Differential attention with the module's λ, λ_init and head norm (``out_norm``: a norm of the merged
    heads before the output projection, timm's ``scale_norm``)."""

    heads: int
    lam: float
    lambda_init: float
    head_norm: Norm
    out_norm: Norm | None = None
    scale: float | None = None  # None: 1/sqrt(dh), dh the width of one of the two query heads

    def __call__(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, proj: Projections,
        keep: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The output on batch-first inputs; ``keep`` (b, 1|h, q, k) hides keys in both softmaxes."""
        q = split_heads(project(proj.q, query), 2 * self.heads)  # (b, 2h, q, dh): heads 2i and 2i+1 pair up
        k = split_heads(project(proj.k, key), 2 * self.heads)
        v = split_heads(project(proj.v, value), self.heads)  # (b, h, k, 2dh)
        scale = q.shape[-1] ** -0.5 if self.scale is None else self.scale
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale
        if keep is not None:
            scores = scores.masked_fill(~keep, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        b, _, q_len, k_len = weights.shape
        pairs = weights.view(b, self.heads, 2, q_len, k_len)
        attended = (pairs[:, :, 0] - self.lam * pairs[:, :, 1]) @ v  # (b, h, q, 2dh)
        merged = merge_heads(self.head_norm(attended) * (1 - self.lambda_init))
        return project(proj.o, merged if self.out_norm is None else self.out_norm(merged))

    @property
    def text(self) -> str:
        norm = f", then {self.out_norm.name}" if self.out_norm is not None else ""
        return (
            f"differential attention: {self.heads} heads, λ {self.lam:.4g} from the module's parameters, "
            f"λ_init {self.lambda_init:.4g}, {self.head_norm.name} per head{norm}"
        )

    @property
    def masked(self) -> str:
        return ""

    def mistakes(self, width: int) -> list[Mistake]:
        """The scores scaled by 1/sqrt of the value head's width 2·dh, or of d_model (ATT201)."""
        dh = width // (2 * self.heads)
        return [
            Mistake("ATT201", f"scale-1/sqrt({name})", f"scales the scores by 1/sqrt({name} {size}) instead of "
                    f"1/sqrt(dh {dh}), the width of one query head", "scale by 1/sqrt(dh).",
                    replace(self, scale=size**-0.5))
            for name, size in (("2·dh", 2 * dh), ("d_model", width))
        ]


def _norms(declared: Mapping[str, Any], tensors: Mapping[str, torch.Tensor]) -> list[Norm]:
    found = []
    for name, fact in (declared.get("post_norms") or {}).items():
        weight = tensors.get(f"declared/post/{name}/weight")
        if weight is not None:
            found.append(Norm(name, fact, weight, tensors.get(f"declared/post/{name}/bias")))
    return found


def _lambda(tensors: Mapping[str, torch.Tensor], lambda_init: float) -> float | None:
    parts = {name: tensors.get(f"declared/{name}") for name in LAMBDAS}
    if parts["lambda_a"] is not None and parts["lambda_b"] is not None:
        return math.exp(float(parts["lambda_a"].sum())) - math.exp(float(parts["lambda_b"].sum())) + lambda_init
    q1, k1, q2, k2 = (parts[name] for name in LAMBDAS[:4])
    if q1 is None or k1 is None or q2 is None or k2 is None:
        return None
    return math.exp(float((q1 * k1).sum())) - math.exp(float((q2 * k2).sum())) + lambda_init


def forms(declared: Mapping[str, Any] | None, tensors: Mapping[str, torch.Tensor], width: int) -> list[Differential]:
    """The differential attention the module's parameters describe; empty when it has no λ, no
    ``lambda_init`` or no head norm of width 2·dh."""
    declared = declared or {}
    lambda_init = (declared.get("scalars") or {}).get("lambda_init")
    if not isinstance(lambda_init, (int, float)) or isinstance(lambda_init, bool):
        return []
    lam = _lambda(tensors, float(lambda_init))
    norms = _norms(declared, tensors)
    out_norm = next((n for n in norms if n.weight.numel() == width), None)
    found = []
    for norm in norms:
        value_width = norm.weight.numel()
        if lam is None or value_width >= width or width % value_width or value_width % 2:
            continue
        found.append(Differential(width // value_width, lam, float(lambda_init), norm, out_norm))
    return found
