"""The variant vocabulary of the reference: score and mask functions with flex_attention's signatures.

Modern attention is plain attention plus one term: a bias (ALiBi, T5 buckets, a
Swin table), a transform of the scores (a tanh soft-cap), a mask (a sliding
window, chunks), a declared scale, or an extra softmax column (sinks). Each term
is written here as ``torch.nn.attention.flex_attention`` writes it, so that
attention-gym's catalogue reads the same:

- ``score_mod(score, b, h, q_idx, kv_idx) -> score``, applied to the scaled scores;
- ``mask_mod(b, h, q_idx, kv_idx) -> keep``, True meaning the key is attended.

:func:`attend` evaluates them on a materialised (b, h, q, k) index grid inside
the readable float64 einsum, so the reference stays checkable by eye and equals
eager flex exactly (``tests/test_dynamic_reference_variants.py``). A mod indexes its
parameters by the index tensors (``slopes[h]``, ``table[h, i, j]``), so the same
function works on the grid and under flex's per-element vmap. Parameters (the window,
the slopes, the table) are read from the module by the caller, never guessed here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

ScoreMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
WindowConvention = Literal["W keys", "W+1 keys"]
AlibiForm = Literal["post-scale", "pre-scale", "symmetric"]


@dataclass(frozen=True)
class Variant:
    """The terms that make one attention differ from plain softmax(q kᵀ / sqrt(d)) v.

    ``scale`` None is 1/sqrt(head_dim); ``sinks`` is one logit per query head that
    joins every softmax row and is then dropped (gpt-oss). ``positional`` says the
    terms depend on token positions, so permuting tokens is not expected to commute.
    """

    name: str = "plain"
    scale: float | None = None
    score_mods: tuple[ScoreMod, ...] = ()
    mask_mods: tuple[MaskMod, ...] = ()
    sinks: torch.Tensor | None = None
    positional: bool = False

    def plus(self, other: Variant) -> Variant:
        """Both variants' terms (a window and a soft-cap, as Gemma 2); ``other``'s scale wins when set."""
        names = [n for n in (self.name, other.name) if n != "plain"]
        return Variant(
            " + ".join(names) or "plain",
            other.scale if other.scale is not None else self.scale,
            self.score_mods + other.score_mods,
            self.mask_mods + other.mask_mods,
            other.sinks if other.sinks is not None else self.sinks,
            self.positional or other.positional,
        )


PLAIN = Variant()


def index_grid(b: int, h: int, q: int, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Broadcastable (b,1,1,1), (1,h,1,1), (1,1,q,1), (1,1,1,k) indices: what flex passes its mods."""
    return (
        torch.arange(b).view(b, 1, 1, 1),
        torch.arange(h).view(1, h, 1, 1),
        torch.arange(q).view(1, 1, q, 1),
        torch.arange(k).view(1, 1, 1, k),
    )


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    variant: Variant = PLAIN,
    keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(mods(q kᵀ · scale), masked [, sinks]) v on (b, h, s, dh); fully masked rows give 0.

    K/V may have fewer heads than Q: query head h reads KV head h // (Hq / Hkv).
    ``keep`` (bool, True = attend, broadcastable to (b, h, q, k)) is and-ed with the mask mods.
    """
    hq, hkv = q.shape[1], k.shape[1]
    if hq != hkv:
        k = k.repeat_interleave(hq // hkv, dim=1)
        v = v.repeat_interleave(hq // hkv, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if variant.scale is None else variant.scale
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale
    grid = index_grid(scores.shape[0], hq, scores.shape[2], scores.shape[3])
    for score_mod in variant.score_mods:
        scores = score_mod(scores, *grid)
    for mask_mod in variant.mask_mods:
        allowed = mask_mod(*grid)
        keep = allowed if keep is None else keep & allowed
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    if variant.sinks is None:
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # all -inf rows -> 0
    else:
        sink = variant.sinks.to(scores.dtype).view(1, hq, 1, 1).expand(*scores.shape[:3], 1)
        weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    return torch.einsum("bhqk,bhkd->bhqd", weights, v)


# ---------------------------------------------------------------- masks


def causal(offset: int = 0) -> MaskMod:
    """Key j is visible from query i when j <= i + offset (offset Lk - Lq: bottom-right)."""
    return lambda b, h, i, j: j <= i + offset


def sliding_window(window: int, convention: WindowConvention, offset: int = 0) -> MaskMod:
    """Causal with a window: ``W keys`` keeps i-W < j <= i (HF, xformers); ``W+1 keys`` keeps
    i-W <= j <= i (flash-attn ``window_size=(W, 0)``, attention-gym ``q - kv <= W``)."""
    reach = window - 1 if convention == "W keys" else window
    return lambda b, h, i, j: (j <= i + offset) & (i + offset - j <= reach)


def local_window(window: int) -> MaskMod:
    """Bidirectional local attention: |i - j| <= W (flash-attn ``window_size=(W, W)``, ModernBERT)."""
    return lambda b, h, i, j: (i - j).abs() <= window


def chunked(chunk: int) -> MaskMod:
    """Causal inside chunks of C tokens (Llama 4, xformers ``BlockDiagonalCausalMask``)."""
    return lambda b, h, i, j: (j <= i) & (i // chunk == j // chunk)


# ---------------------------------------------------------------- scores


def alibi_slopes(heads: int) -> torch.Tensor:
    """The standard ALiBi slopes 2^(-8(h+1)/H); for H not a power of two, those of the
    closest power of two below, then every other slope of twice that (BLOOM, MPT, attention-gym)."""

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start**p for p in range(1, n + 1)]

    closest = 2 ** math.floor(math.log2(heads))
    slopes = power_of_two(closest)
    if closest != heads:
        slopes += power_of_two(2 * closest)[0::2][: heads - closest]
    return torch.tensor(slopes, dtype=torch.float64)


def alibi(slopes: torch.Tensor, form: AlibiForm, scale: float = 1.0) -> ScoreMod:
    """ALiBi bias m_h·(j - i) on the scaled scores (post-scale: BLOOM, MPT); ``pre-scale`` adds
    it before the scale (Falcon), which is m_h·scale·(j - i) after it; ``symmetric`` is
    -m_h·|i - j| (flash-attn's non-causal ``alibi_slopes``)."""
    m = slopes.to(torch.float64) * (scale if form == "pre-scale" else 1.0)
    if form == "symmetric":
        return lambda s, b, h, i, j: s - m[h] * (i - j).abs()
    return lambda s, b, h, i, j: s + m[h] * (j - i)


def softcap(cap: float) -> ScoreMod:
    """The tanh soft-cap c·tanh(s / c) on the scaled scores (Gemma 2, Grok-1, flash-attn ``softcap``)."""
    return lambda s, b, h, i, j: cap * torch.tanh(s / cap)


@dataclass(frozen=True, eq=False)
class PositionBias:
    """A bias already laid out as (h, q, k) (T5's ``position_bias``, Swin's gathered table), a score_mod;
    ``reversed_bias`` is the one an index built from key-minus-query offsets gathers (the mutant
    ``position-bias-transposed`` reads it), which for BEiT is not the transpose: its class-token
    entries keep their places."""

    bias: torch.Tensor
    reversed_bias: torch.Tensor | None = None

    def __call__(self, s: torch.Tensor, b: torch.Tensor, h: torch.Tensor, i: torch.Tensor, j: torch.Tensor):
        return s + self.bias[h, i, j]

    def transposed(self, s: torch.Tensor, b: torch.Tensor, h: torch.Tensor, i: torch.Tensor, j: torch.Tensor):
        """This term read the other way round: [h, j, i] unless a reversed bias is known."""
        if self.reversed_bias is None:
            return self(s, b, h, j, i)
        return s + self.reversed_bias[h, i, j]


def position_bias(bias: torch.Tensor, reversed_bias: torch.Tensor | None = None) -> ScoreMod:
    """A bias table already laid out as (h, q, k) (T5's ``position_bias``, Swin's gathered table)."""
    return PositionBias(bias.to(torch.float64), None if reversed_bias is None else reversed_bias.to(torch.float64))


def relative_table_bias(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """(h, q, k) bias ``table[index[i, j], h]`` from a Swin/BEiT ``relative_position_bias_table`` of shape
    (entries, h) and its (q, k) ``relative_position_index``, gathered as timm's ``WindowAttention`` does."""
    return table.to(torch.float64)[index.long()].permute(2, 0, 1)


def swin_index(window: tuple[int, int]) -> torch.Tensor:
    """Swin's (Wh·Ww, Wh·Ww) ``relative_position_index`` of a window: the entry of the offset
    (Δrow, Δcol) of query i from key j is (Δrow + Wh - 1)·(2Ww - 1) + Δcol + Ww - 1."""
    rows, cols = torch.meshgrid(torch.arange(window[0]), torch.arange(window[1]), indexing="ij")
    coords = torch.stack([rows.flatten(), cols.flatten()])  # (2, N)
    relative = coords[:, :, None] - coords[:, None, :]  # (2, N, N): query minus key
    return (relative[0] + window[0] - 1) * (2 * window[1] - 1) + relative[1] + window[1] - 1


def beit_index(window: tuple[int, int], reversed_offsets: bool = False) -> torch.Tensor:
    """BEiT's (Wh·Ww + 1)² index: Swin's for the patches (of key-minus-query offsets where
    ``reversed_offsets``), and the table's last three entries for the class token (as a query: E - 3,
    as a key: E - 2, to itself: E - 1, with E = (2Wh-1)(2Ww-1) + 3)."""
    entries = (2 * window[0] - 1) * (2 * window[1] - 1) + 3
    tokens = window[0] * window[1] + 1
    index = torch.zeros(tokens, tokens, dtype=torch.long)
    patches = swin_index(window)
    index[1:, 1:] = patches.T if reversed_offsets else patches
    index[0, :] = entries - 3
    index[:, 0] = entries - 2
    index[0, 0] = entries - 1
    return index


def standard_relative_index(window: tuple[int, int], entries: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The index a table of ``entries`` rows is read by in a Wh×Ww window, and the one built from
    key-minus-query offsets instead: Swin's for (2Wh-1)(2Ww-1) rows, BEiT's for three more (its class
    token); None for any other size."""
    offsets = (2 * window[0] - 1) * (2 * window[1] - 1)
    if entries == offsets:
        return swin_index(window), swin_index(window).T
    if entries == offsets + 3:
        return beit_index(window), beit_index(window, reversed_offsets=True)
    return None


def t5_buckets(relative: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's bucket of each relative position j - i: exact below half the buckets, logarithmic up to
    ``max_distance`` (HF ``T5Attention._relative_position_bucket``, computed the same way)."""
    buckets = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative > 0).long() * num_buckets
        relative = relative.abs()
    else:
        relative = -torch.min(relative, torch.zeros_like(relative))
    max_exact = num_buckets // 2
    is_small = relative < max_exact
    large = max_exact + (
        torch.log(relative.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, relative, large)


def t5_bias(table: torch.Tensor, q_len: int, k_len: int, bidirectional: bool, max_distance: int) -> torch.Tensor:
    """(h, q, k) bias from a T5 ``relative_attention_bias`` weight of shape (num_buckets, h)."""
    relative = torch.arange(k_len).view(1, -1) - torch.arange(q_len).view(-1, 1)
    buckets = t5_buckets(relative, bidirectional, table.shape[0], max_distance)
    return table.to(torch.float64)[buckets].permute(2, 0, 1)
