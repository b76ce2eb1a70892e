"""The reference configurations a module's declarations allow, anchored to what it declares.

The child reads a module's variant parameters (``inside.variant_facts``); this module turns them into
the few reference configurations they admit: the declared RoPE frequencies in both pairing
conventions, a window in both off-by-one conventions (causal or both-sided), ALiBi in its three
forms, and every other declared term (soft-cap, scale, sinks, q/k norm, T5 table) as declared. Nothing is fitted
freely: a RoPE with the wrong exponent at declared base b equals a correct RoPE of base sqrt(b),
and since only base b is tried, it stays a mismatch for the diagnosis to name (ATT402).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from attncheck.dynamic.reference import rope_scaling, variants
from attncheck.dynamic.reference.mha import RopeHook, merge_heads, split_heads
from attncheck.dynamic.reference.rope import RopeSpec
from attncheck.dynamic.reference.variants import Variant

BASE_NAMES = ("rope_theta", "rotary_base", "rotary_emb_base", "base")
WINDOW_NAMES = ("sliding_window", "window_size")
CHUNK_NAMES = ("attention_chunk_size", "chunk_size")
CAP_NAMES = ("softcap", "attn_logit_softcapping", "logit_softcap")
SCALE_NAMES = ("scaling", "scale", "softmax_scale")
BUFFER_SCHEME = "frequencies from the module's inv_freq buffer"
DECLARED_AS = "declared_as"
"""The key of the declared scalars that maps a canonical name to the module's own, where it used
another (``inside.variant_facts.ALIASES``)."""


TERMS = {
    "window": "sliding window or chunk size",
    "softcap": "soft-cap",
    "dynamic-rope": "dynamic NTK RoPE scaling with max_position_embeddings",
}
"""The terms a probe makes visible with a longer or larger input (``Experiment.variant``)."""


def is_positive(value: Any) -> bool:
    """A finite number above zero, not a flag: what a declared window, cap or base must be to be one."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def first_positive(scalars: Mapping[str, Any], names: tuple[str, ...]) -> tuple[str, float] | None:
    """(name, value) of the first of ``names`` the scalars hold as a positive number; None when none does."""
    return next(((name, scalars[name]) for name in names if is_positive(scalars.get(name))), None)


def spelled(scalars: Mapping[str, Any], name: str) -> str:
    """The module's own name for the declared scalar ``name`` (``window`` for ``sliding_window``), for messages."""
    return scalars.get(DECLARED_AS, {}).get(name, name)


def declared_term(scalars: Mapping[str, Any], term: str) -> tuple[str, Any] | None:
    """(attribute name, value) of one of ``TERMS`` among a module's declared scalars, None when absent;
    read the same way in the child (whether to run the probe) and in the parent (whether to judge it)."""
    if term == "window":
        switched_off = scalars.get("use_sliding_window") is False  # Qwen2: a sliding_window kept but unused
        return None if switched_off else first_positive(scalars, WINDOW_NAMES + CHUNK_NAMES)
    if term == "softcap":
        return first_positive(scalars, CAP_NAMES)
    scaling = scalars.get("rope_scaling") or scalars.get("rope_parameters")
    dynamic = isinstance(scaling, Mapping) and rope_scaling.scheme_of(scaling) == "dynamic"
    limit = scalars.get("max_position_embeddings")
    return ("max_position_embeddings", limit) if dynamic and isinstance(limit, int) else None


@dataclass(frozen=True)
class Candidate:
    """One reference configuration: the variant's terms, its rotation and its q/k norm."""

    variant: Variant
    rope: RopeSpec | None = None
    qk_norm: RopeHook | None = None
    masks_causal: bool = False  # the variant's mask is causal itself (window, chunks)


@dataclass(frozen=True)
class Declared:
    """The child's ``variant_facts.declarations`` facts with their tensors, and the sizes they are read at."""

    facts: Mapping[str, Any]
    tensors: Mapping[str, torch.Tensor]
    heads: int
    head_dim: int
    q_len: int
    k_len: int

    def scalar(self, names: Collection[str]) -> Any:
        scalars = self.facts.get("scalars", {})
        return next((scalars[n] for n in names if n in scalars), None)

    def tensor(self, role: str) -> torch.Tensor | None:
        return self.tensors.get(f"declared/{role}")

    @property
    def anything(self) -> bool:
        return bool(self.facts.get("scalars") or self.facts.get("tensors") or self.facts.get("norms"))


# ---------------------------------------------------------------- rotation


def rope_specs(declared: Declared, rotary: bool) -> list[RopeSpec | None]:
    """The declared rotation in both pairing conventions; [None] when the module declares none."""
    inv_freq = declared.tensor("inv_freq")
    base = declared.scalar(BASE_NAMES)
    scaling = declared.scalar(("rope_scaling",)) or declared.scalar(("rope_parameters",))
    if inv_freq is None and base is None and not scaling:
        return [None]
    if inv_freq is None and not rotary:  # only a base in a config the module shares (Dia's cross-attention
        return [None]  # reads its decoder's rope_theta): code that shows no rotation rotates nothing
    if isinstance(scaling, Mapping) and base is None:
        base = scaling.get("rope_theta")
    width = _rotary_width(declared, inv_freq)
    factor = declared.scalar(("attention_scaling",))
    grows = rope_scaling.scheme_of(scaling if isinstance(scaling, Mapping) else None) == "dynamic"
    if inv_freq is not None and not grows:  # a dynamic buffer holds the frequencies of the last length run
        frequencies, scheme = inv_freq, BUFFER_SCHEME
        attention = float(factor) if factor is not None else 1.0
    else:
        try:
            found = rope_scaling.frequencies(
                float(base or 10000.0),
                width,
                scaling if isinstance(scaling, Mapping) else None,
                declared.scalar(("max_position_embeddings",)),
                declared.k_len,
            )
        except (ValueError, KeyError, TypeError, ZeroDivisionError):
            return [None] if not rotary else []
        frequencies, attention = found.inv_freq, found.attention_factor
        scheme = f"declared base {float(base or 10000.0):g}" + (
            f" with {found.scheme} scaling" if found.scheme != "default" else ""
        )
    rotary_dim = None if width == declared.head_dim else width
    return [
        RopeSpec(
            style,
            rotary_dim,
            float(base or 10000.0),
            tuple(float(f) for f in frequencies),
            attention,
            scheme,
        )
        for style in ("half", "interleaved")
    ]


def _rotary_width(declared: Declared, inv_freq: torch.Tensor | None) -> int:
    if inv_freq is not None:
        return 2 * inv_freq.numel()
    rotary_dim = declared.scalar(("rotary_dim",))
    if isinstance(rotary_dim, int) and 0 < rotary_dim <= declared.head_dim:
        return rotary_dim
    fraction = declared.scalar(("partial_rotary_factor", "rotary_pct"))
    if isinstance(fraction, (int, float)) and 0 < fraction <= 1:
        return int(declared.head_dim * fraction) // 2 * 2
    return declared.head_dim


# ---------------------------------------------------------------- scores and masks


UNSCALED_BY_DESIGN = "ATT201/by-design"
"""Not a code: the static pass judged the scores unscaled on purpose (GPT-Neo), so the scale is 1."""


def _scale(declared: Declared, static_codes: Collection[str]) -> float | None:
    """A declared scale, trusted only where the static pass did not call the scaling wrong (ATT201),
    at most 1 and not 1/sqrt(d_model) with several heads; ``query_pre_attn_scalar`` s gives s^-0.5,
    a T5 bias table gives 1, and so does a static verdict that the scores are unscaled by design."""
    if "ATT201" in static_codes:
        return None
    if UNSCALED_BY_DESIGN in static_codes:
        return 1.0
    pre_attn = declared.scalar(("query_pre_attn_scalar",))
    if isinstance(pre_attn, (int, float)) and pre_attn > 0:
        return float(pre_attn) ** -0.5
    scale = declared.scalar(SCALE_NAMES)
    width = declared.heads * declared.head_dim
    if declared.heads > 1 and isinstance(scale, (int, float)) and math.isclose(scale, width**-0.5, rel_tol=1e-6):
        return None  # 1/sqrt(d_model) with several heads: the classic wrong scale (ATT201), not a choice
    if isinstance(scale, (int, float)) and not isinstance(scale, bool) and 0 < scale <= 1:
        return float(scale)  # above 1 it multiplies the scores up: sqrt(head_dim) where 1/sqrt was meant
    if declared.tensor("t5_table") is not None or declared.scalar(("has_relative_attention_bias",)):
        return 1.0  # T5: the 1/sqrt(d) is folded into the initialisation
    return None


def _masks(declared: Declared) -> list[tuple[str, tuple[variants.MaskMod, ...], bool]]:
    """(description, mask mods, causal) for a declared window or chunk; one empty option otherwise.

    A bidirectional window is read in both conventions too: |i-j| < W (HF's bidirectional
    sliding-window overlay) and |i-j| <= W (flash-attn ``window_size=(W, W)``)."""
    window = declared.scalar(WINDOW_NAMES) if declared.scalar(("use_sliding_window",)) is not False else None
    chunk = declared.scalar(CHUNK_NAMES)
    offset = declared.k_len - declared.q_len
    if isinstance(window, int) and not isinstance(window, bool) and window > 0:
        return [
            (f"sliding window {window} (W keys)", (variants.sliding_window(window, "W keys", offset),), True),
            (f"sliding window {window} (W+1 keys)", (variants.sliding_window(window, "W+1 keys", offset),), True),
            (f"local window |i-j| < {window}", (variants.local_window(window - 1),), False),
            (f"local window |i-j| <= {window}", (variants.local_window(window),), False),
        ]
    if isinstance(chunk, int) and not isinstance(chunk, bool) and chunk > 0:
        return [(f"chunked causal, chunks of {chunk}", (variants.chunked(chunk),), True)]
    return [("", (), False)]


def relative_biases(declared: Declared) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(description, (h, q, k) bias, the bias read by reversed offsets) of a relative-position table:
    gathered by the standard index of
    the 2-D window the module declares (Swin's, or BEiT's with its class token, by the table's size),
    never by the module's own ``relative_position_index``, which ``__init__`` may have built wrongly
    (read transposed, it is ATT405), unless the window or the table's size is not a known one; a
    table with neither index nor window is a 1-D one (2M-1 offsets, centred) read both ways, i - j
    and j - i, since a learned table has no direction of its own. Empty when it declares no table,
    or one that does not span these query and key lengths."""
    table = declared.tensor("relative_table")
    if table is None or table.shape[1] != declared.heads:
        return []
    index = declared.tensor("relative_index")
    reversed_index = index.T if index is not None else None
    window = declared.scalar(("window_size",))
    if isinstance(window, list) and len(window) == 2:
        standard = variants.standard_relative_index((int(window[0]), int(window[1])), len(table))
        index, reversed_index = (index, reversed_index) if standard is None else standard
    if index is not None and reversed_index is not None:
        if tuple(index.shape) != (declared.q_len, declared.k_len) or int(index.max()) >= len(table):
            return []
        bias, reversed_bias = (variants.relative_table_bias(table, i) for i in (index, reversed_index))
        return [("relative-position table", bias, reversed_bias)]
    centre = (len(table) - 1) // 2
    offsets = torch.arange(declared.q_len).view(-1, 1) - torch.arange(declared.k_len).view(1, -1)  # i - j
    if len(table) % 2 == 0 or centre < max(declared.q_len, declared.k_len) - 1:
        return []
    return [
        (
            f"1-D relative-position table ({text})",
            variants.relative_table_bias(table, centre + sign * offsets),
            variants.relative_table_bias(table, centre - sign * offsets),
        )
        for text, sign in (("i - j", 1), ("j - i", -1))
    ]


def _biases(declared: Declared, scale: float) -> list[tuple[str, tuple[variants.ScoreMod, ...]]]:
    """(description, score mods) for the declared biases: ALiBi in its forms, a T5 table, a relative table."""
    options: list[tuple[str, tuple[variants.ScoreMod, ...]]] = [("", ())]
    slopes = declared.tensor("alibi_slopes")
    if slopes is not None and slopes.numel() != declared.heads:
        slopes = None  # a (b·h, 1, k) BLOOM tensor or a mask: not a slope per head
    if slopes is None and (declared.scalar(("alibi", "use_alibi")) is True):
        slopes = variants.alibi_slopes(declared.heads)
    if slopes is not None:
        slopes = slopes.reshape(-1)
        options = [
            (f"ALiBi ({form})", (variants.alibi(slopes, form, scale),))  # type: ignore[arg-type]
            for form in ("post-scale", "pre-scale", "symmetric")
        ]
    table = declared.tensor("t5_table")
    if table is not None and table.shape[1] == declared.heads:
        bidirectional = not declared.scalar(("is_decoder",))
        distance = declared.scalar(("relative_attention_max_distance",)) or 128
        bias = variants.t5_bias(table, declared.q_len, declared.k_len, bidirectional, int(distance))
        t5 = variants.position_bias(bias)
        options = [(f"{text} + T5 relative bias".lstrip(" +"), (*mods, t5)) for text, mods in options]
    relative = relative_biases(declared)
    if relative:
        options = [
            (f"{text} + {name}".lstrip(" +"), (*mods, variants.position_bias(bias, reversed_bias)))
            for text, mods in options
            for name, bias, reversed_bias in relative
        ]
    return options


def candidates(declared: Declared, static_codes: Collection[str], rotary: bool) -> list[Candidate]:
    """Every configuration the declarations admit; empty when the module declares nothing."""
    if not declared.anything:
        return []
    scale = _scale(declared, static_codes)
    effective = scale if scale is not None else 1.0 / math.sqrt(declared.head_dim)
    cap = declared.scalar(CAP_NAMES)
    caps: tuple[variants.ScoreMod, ...] = ()
    if is_positive(cap):
        caps = (variants.softcap(float(cap)),)
    sinks = declared.tensor("sinks")
    if sinks is not None and sinks.numel() != declared.heads:
        sinks = None
    norm = qk_norm_hook(declared)
    found = []
    for rope, (mask_text, masks, causal), (bias_text, biases) in itertools.product(
        rope_specs(declared, rotary), _masks(declared), _biases(declared, effective)
    ):
        terms = [
            f"scale {scale:.4g}" if scale is not None else "",
            bias_text,
            f"soft-cap {cap:g}" if caps else "",
            mask_text,
            "sinks" if sinks is not None else "",
            "q/k norm" if norm is not None else "",
        ]
        variant = Variant(
            ", ".join(t for t in terms if t) or "declared rotation",
            scale,
            biases + caps,
            masks,
            sinks,
            positional=bool(masks or biases),
        )
        found.append(Candidate(variant, rope, norm, causal))
    return found


# ---------------------------------------------------------------- q/k norm


def normalise(
    x: torch.Tensor, fact: Mapping[str, Any], weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """A norm layer the child described (``variant_facts._norm``: layer or RMS, eps, offset) over the last axis."""
    if fact["kind"] == "layer":
        x = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + fact["eps"])
    else:
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + fact["eps"])
    x = x * (weight + fact.get("offset", 0.0))
    return x + bias if bias is not None else x


def qk_norm_hook(declared: Declared) -> RopeHook | None:
    """The module's own q/k norm layers as a reference hook on per-head (b, h, s, dh) tensors:
    per head when the weight is head_dim wide (Qwen3), else across the heads (OLMo2)."""
    norms = declared.facts.get("norms") or {}
    if not norms:
        return None

    def apply(x: torch.Tensor, role: str) -> torch.Tensor:
        fact = norms.get(role)
        if fact is None:
            return x
        weight = declared.tensors[f"declared/{role}_norm/weight"]
        bias = declared.tensors.get(f"declared/{role}_norm/bias")
        if weight.numel() == x.shape[-1]:
            return normalise(x, fact, weight, bias)
        return split_heads(normalise(merge_heads(x), fact, weight, bias), x.shape[1])

    return lambda q, k: (apply(q, "q"), apply(k, "k"))
