"""The pre-norm and residual of a VAE / U-Net attention block: ``x + proj_out(attention(norm(x)))``.

The VQGAN / latent-diffusion ``AttnBlock`` and diffusers' VAE blocks normalise the feature map
(GroupNorm, or a LayerNorm over tokens), project q, k, v from that, attend over the pixels and add the
block's input back. The binding reads which layer forward applies to its input first
(``source_facts.pre_norm``); the child describes the module's norms (``variant_facts``: kind, eps,
groups, weight, bias). The reference then normalises its inputs with that layer before the
projections and adds the raw input to the output, so attention is still what is checked, and a
mistake inside it is still named (the mutants read the normalised inputs and get the same residual).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from attncheck.dynamic.reference.variant_fit import normalise

PreHook = Callable[[torch.Tensor], torch.Tensor]
"""A block's (b, s, d) input -> what its projections read: the module's own norm of it."""


def hook(
    name: str, declared: Mapping[str, Any] | None, tensors: Mapping[str, torch.Tensor], width: int
) -> PreHook | None:
    """The module's norm layer ``name`` as the child described it, when it is as wide as the input."""
    fact = ((declared or {}).get("pre_norms") or {}).get(name)
    weight = tensors.get(f"declared/pre/{name}/weight")
    if fact is None or weight is None or weight.numel() != width:
        return None
    bias = tensors.get(f"declared/pre/{name}/bias")
    if fact["kind"] != "group":
        return lambda x: normalise(x, fact, weight, bias)
    return lambda x: _group_norm(x, fact["groups"], fact["eps"], weight, bias)


def residual(out: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """The block's input added back to its attention output (a ``post_norm.PostHook``)."""
    return out + query


def _group_norm(
    x: torch.Tensor, groups: int, eps: float, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """GroupNorm of a (b, s, d) sequence laid out as a feature map: statistics over each group of
    channels and every position, the affine per channel."""
    b, s, d = x.shape
    grouped = x.reshape(b, s, groups, d // groups)
    mean = grouped.mean(dim=(1, 3), keepdim=True)
    var = grouped.var(dim=(1, 3), keepdim=True, unbiased=False)
    normed = ((grouped - mean) / torch.sqrt(var + eps)).reshape(b, s, d) * weight
    return normed + bias if bias is not None else normed
