"""RoPE frequencies from what a module declares: the base, the rotary width and the scaling scheme.

A module trained with ``rope_theta=500000`` and ``rope_scaling={"rope_type": "yarn", ...}`` rotates
with frequencies the reference cannot guess; it can recompute them from the same declaration,
with the formulas of HF ``modeling_rope_utils`` (linear, dynamic NTK, YaRN with its attention
factor, LongRoPE, Llama 3.1), in float64. The attention factor multiplies cos and sin, so the
scores grow by its square: the reference applies it as part of the rotation.

``tests/test_dynamic_reference_rope_scaling.py`` checks every scheme against the installed ``transformers``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

SCHEMES = ("default", "linear", "ntk", "dynamic", "yarn", "longrope", "llama3")


@dataclass(frozen=True)
class Frequencies:
    """(r/2,) angular frequencies and the factor that multiplies cos and sin."""

    inv_freq: torch.Tensor
    attention_factor: float = 1.0
    scheme: str = "default"


def standard(base: float, rotary_dim: int) -> torch.Tensor:
    """base^(-2i/r), i = 0 .. r/2 - 1."""
    return 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)


def scheme_of(scaling: Mapping[str, Any] | None) -> str:
    """The scheme a ``rope_scaling`` / ``rope_parameters`` dict names (``rope_type``, older ``type``)."""
    if not scaling:
        return "default"
    return str(scaling.get("rope_type") or scaling.get("type") or "default")


def frequencies(
    base: float,
    rotary_dim: int,
    scaling: Mapping[str, Any] | None = None,
    max_position_embeddings: int | None = None,
    seq_len: int | None = None,
) -> Frequencies:
    """The frequencies a declaration produces at ``seq_len`` (dynamic and LongRoPE depend on it).

    Raises ValueError for a scheme this module does not model, so the caller can say which.
    """
    scheme = scheme_of(scaling)
    params = dict(scaling or {})
    if scheme == "default":
        return Frequencies(standard(base, rotary_dim))
    if scheme == "linear":
        return Frequencies(standard(base, rotary_dim) / params["factor"], scheme=scheme)
    if scheme == "ntk":
        grown = base * params["factor"] ** (rotary_dim / (rotary_dim - 2))
        return Frequencies(standard(grown, rotary_dim), 1.0, scheme)
    if scheme == "dynamic":
        return _dynamic(base, rotary_dim, params, _required(max_position_embeddings, scheme), seq_len)
    if scheme == "yarn":
        return _yarn(base, rotary_dim, params, max_position_embeddings)
    if scheme == "longrope":
        return _longrope(base, rotary_dim, params, max_position_embeddings, seq_len)
    if scheme == "llama3":
        return _llama3(base, rotary_dim, params)
    raise ValueError(f"rope scaling {scheme!r} is not modelled (known: {', '.join(SCHEMES)})")


def _required(value: int | None, scheme: str) -> int:
    if value is None:
        raise ValueError(f"rope scaling {scheme!r} needs max_position_embeddings")
    return value


def _dynamic(base: float, dim: int, params: dict, max_positions: int, seq_len: int | None) -> Frequencies:
    """Dynamic NTK: the base grows only once the sequence is longer than max_position_embeddings."""
    length = max(seq_len or max_positions, max_positions)
    factor = params["factor"]
    grown = base * ((factor * length / max_positions) - (factor - 1)) ** (dim / (dim - 2))
    return Frequencies(standard(grown, dim), 1.0, "dynamic")


def _mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(base: float, dim: int, params: dict, max_positions: int | None) -> Frequencies:
    """YaRN: a ramp between interpolated (/factor) and original frequencies, and cos/sin × (0.1 ln f + 1)."""
    original = params.get("original_max_position_embeddings") or _required(max_positions, "yarn")
    factor = params.get("factor") or _required(max_positions, "yarn") / original
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention_factor = _mscale(factor, mscale) / _mscale(factor, mscale_all_dim)
        else:
            attention_factor = _mscale(factor)
    beta_fast, beta_slow = params.get("beta_fast") or 32, params.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # HF's guard against a zero-width ramp
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    extrapolation = standard(base, dim)
    inv_freq = extrapolation / factor * ramp + extrapolation * (1 - ramp)
    return Frequencies(inv_freq, float(attention_factor), "yarn")


def _longrope(base: float, dim: int, params: dict, max_positions: int | None, seq_len: int | None) -> Frequencies:
    """LongRoPE (Phi-3): per-frequency factors, short or long by the sequence length, and
    cos/sin × sqrt(1 + ln f / ln L)."""
    original = params.get("original_max_position_embeddings") or _required(max_positions, "longrope")
    factor = params.get("factor") or _required(max_positions, "longrope") / original
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    long = seq_len is not None and seq_len > original
    ext = torch.tensor(params["long_factor" if long else "short_factor"], dtype=torch.float64)
    return Frequencies(standard(base, dim) / ext, float(attention_factor), "longrope")


def _llama3(base: float, dim: int, params: dict) -> Frequencies:
    """Llama 3.1: long wavelengths divided by the factor, short ones kept, a smooth blend between."""
    inv_freq = standard(base, dim)
    factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
    context = params["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > context / low, inv_freq / factor, inv_freq)
    smooth = (context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= context / high) & (wavelen <= context / low)
    return Frequencies(torch.where(medium, smoothed, scaled), 1.0, "llama3")
