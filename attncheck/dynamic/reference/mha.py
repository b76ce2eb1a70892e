"""Trusted references, in float64, short enough to check by eye.

Everything the dynamic checker concludes rests on these functions, so they are
written for obviousness, not speed: one einsum per step, shapes in comments.
They run in the parent process, never in the child that imports user code.

Conventions: weights are laid out like ``nn.Linear`` (``out_features, in_features``);
a mask is boolean with True meaning *keep*, broadcastable to (b, h, q, k).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from attncheck.dynamic.reference.variants import Variant, attend

Causal = Literal["none", "top-left", "bottom-right"]
RopeHook = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""Rotates per-head (q, k) of shape (b, h, s, dh) before the scores; see ``rope.rope_hook``.
The same signature serves the module's own q/k norm layers (``variant_fit.qk_norm_hook``)."""


@dataclass(frozen=True)
class Linear:
    """A projection ``x @ weight.T + bias``; weight is (out_features, in_features)."""

    weight: torch.Tensor
    bias: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = x @ self.weight.T
        return out + self.bias if self.bias is not None else out


@dataclass(frozen=True)
class Projections:
    """The four projections of multi-head attention; None means identity."""

    q: Linear | None
    k: Linear | None
    v: Linear | None
    o: Linear | None


def _apply(proj: Linear | None, x: torch.Tensor) -> torch.Tensor:
    return x if proj is None else proj(x)


def causal_keep(q_len: int, k_len: int, alignment: Causal) -> torch.Tensor | None:
    """(q, k) bool mask of the keys each query may see; None when not causal.

    top-left: query i sees keys 0..i (SDPA ``is_causal``).
    bottom-right: query i sees keys 0..i + (k_len - q_len) (flash-attn, KV cache).
    """
    if alignment == "none":
        return None
    offset = 0 if alignment == "top-left" else k_len - q_len
    rows = torch.arange(q_len).unsqueeze(1)
    cols = torch.arange(k_len).unsqueeze(0)
    return cols <= rows + offset


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(b, s, heads * dh) -> (b, heads, s, dh)."""
    b, s, d = x.shape
    return x.reshape(b, s, heads, d // heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(b, h, s, dh) -> (b, s, h * dh)."""
    b, h, s, dh = x.shape
    return x.transpose(1, 2).reshape(b, s, h * dh)


def sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    keep: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """softmax(q k^T * scale, masked) v on (b, h, s, dh); fully masked rows give 0.

    K/V may have fewer heads than Q (grouped-query attention): query head h
    uses KV head h // (Hq / Hkv), as HF ``repeat_kv`` and SDPA ``enable_gqa`` do.
    Plain attention is the variant with no terms (``variants.attend``).
    """
    return attend(q, k, v, Variant(scale=scale), keep)


def mha(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    proj: Projections,
    num_heads: int,
    *,
    num_kv_heads: int | None = None,
    keep: torch.Tensor | None = None,
    causal: Causal = "none",
    scale: float | None = None,
    rope: RopeHook | None = None,
    qk_norm: RopeHook | None = None,
    variant: Variant | None = None,
) -> torch.Tensor:
    """Multi-head (or grouped-query) attention on batch-first (b, s, d) inputs.

    ``qk_norm`` normalises the per-head q and k (QK-norm), then ``rope`` rotates them
    (rotary position embedding); ``variant`` adds its score, mask and sink terms.
    """
    q = split_heads(_apply(proj.q, query), num_heads)
    k = split_heads(_apply(proj.k, key), num_kv_heads or num_heads)
    v = split_heads(_apply(proj.v, value), num_kv_heads or num_heads)
    if qk_norm is not None:
        q, k = qk_norm(q, k)
    if rope is not None:
        q, k = rope(q, k)
    causal_mask = causal_keep(q.shape[2], k.shape[2], causal)
    if causal_mask is not None:
        keep = causal_mask if keep is None else keep & causal_mask
    variant = variant if variant is not None else Variant(scale=scale)
    return _apply(proj.o, merge_heads(attend(q, k, v, variant, keep)))


def fully_masked_rows(keep: torch.Tensor | None, shape: tuple[int, int, int, int]) -> torch.Tensor:
    """(b, q) bool: queries that see no key in any head, excluded from comparisons."""
    if keep is None:
        return torch.zeros(shape[0], shape[2], dtype=torch.bool)
    full = keep.expand(shape)
    return ~full.any(dim=-1).any(dim=1)
