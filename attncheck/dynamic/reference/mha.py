"""Trusted references, in float64, short enough to check by eye.

Everything the dynamic checker concludes rests on these functions, so they are
written for obviousness, not speed: one einsum per step, shapes in comments.
They run in the parent process, never in the child that imports user code.

Conventions: weights are laid out like ``nn.Linear`` (``out_features, in_features``);
a mask is boolean with True meaning *keep*, broadcastable to (b, h, q, k).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

Causal = Literal["none", "top-left", "bottom-right"]
RopeHook = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""Rotates per-head (q, k) of shape (b, h, s, dh) before the scores; see ``rope.rope_hook``."""


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
    """
    hq, hkv = q.shape[1], k.shape[1]
    if hq != hkv:
        k = k.repeat_interleave(hq // hkv, dim=1)
        v = v.repeat_interleave(hq // hkv, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # all -inf rows -> 0
    return torch.einsum("bhqk,bhkd->bhqd", weights, v)


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
) -> torch.Tensor:
    """Multi-head (or grouped-query) attention on batch-first (b, s, d) inputs.

    ``rope`` rotates the per-head q and k (rotary position embedding) when given.
    """
    q = split_heads(_apply(proj.q, query), num_heads)
    k = split_heads(_apply(proj.k, key), num_kv_heads or num_heads)
    v = split_heads(_apply(proj.v, value), num_kv_heads or num_heads)
    if rope is not None:
        q, k = rope(q, k)
    causal_mask = causal_keep(q.shape[2], k.shape[2], causal)
    if causal_mask is not None:
        keep = causal_mask if keep is None else keep & causal_mask
    return _apply(proj.o, merge_heads(sdpa(q, k, v, keep, scale)))


def fully_masked_rows(keep: torch.Tensor | None, shape: tuple[int, int, int, int]) -> torch.Tensor:
    """(b, q) bool: queries that see no key in any head, excluded from comparisons."""
    if keep is None:
        return torch.zeros(shape[0], shape[2], dtype=torch.bool)
    full = keep.expand(shape)
    return ~full.any(dim=-1).any(dim=1)
