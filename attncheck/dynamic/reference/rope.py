"""Rotary position embedding: trusted references and the basis-vector fingerprint.

Two conventions are legitimate and must never be flagged:

- half-split (HF LLaMA ``rotate_half``): dim ``i`` rotates with dim ``i + r/2`` at
  frequency ``base^(-2i/r)``; cos/sin are built as ``cat(freqs, freqs)``.
- interleaved (Meta LLaMA, GPT-J): dims ``2i`` and ``2i+1`` rotate together at
  frequency ``base^(-2i/r)``; cos/sin are built as ``repeat_interleave(freqs, 2)``.

Only the first ``r`` (rotary) dims of a head rotate; the rest pass through.

The fingerprint reads a rotation back from its images of unit basis vectors, so the
runner only has to run the user's rotation on ``e_j`` at positions ``0..P`` and hand
the outputs here: partner dims, frequencies, sign and rotary width come out, and the
rotation is named as one of the conventions or as a catalogue mistake (ATT402).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import torch

Style = Literal["half", "interleaved"]
InvFreq = Literal["standard", "missing-step-2", "positive-exponent", "head-dim-denominator"]


@dataclass(frozen=True)
class RopeSpec:
    """What a module's rotary embedding is meant to be."""

    style: Style = "half"
    rotary_dim: int | None = None  # None: the whole head
    base: float = 10000.0
    frequencies: tuple[float, ...] | None = None  # declared by the module (rope_scaling, inv_freq); None: from base
    attention_factor: float = 1.0  # multiplies cos and sin (YaRN, LongRoPE)
    scheme: str = ""  # where explicit frequencies come from, for the report

    def width(self, head_dim: int) -> int:
        return head_dim if self.rotary_dim is None else self.rotary_dim

    def inv_freq(self, head_dim: int, variant: InvFreq = "standard") -> torch.Tensor:
        """The spec's frequencies; a mistaken ``variant`` is always built from the base."""
        if self.frequencies is not None and variant == "standard":
            return torch.tensor(self.frequencies, dtype=torch.float64)
        return inv_freq(self.width(head_dim), self.base, variant, head_dim)


def inv_freq(rotary_dim: int, base: float, variant: InvFreq = "standard", head_dim: int | None = None) -> torch.Tensor:
    """(r/2,) angular frequencies; the variants are the known ways to get them wrong.

    standard: ``base^(-2i/r)``; missing-step-2: ``base^(-i/r)`` (``arange(r//2)/r``);
    positive-exponent: ``base^(2i/r)`` (forgot the ``1.0 /``); head-dim-denominator:
    ``base^(-2i/head_dim)`` for a partial rotary width.
    """
    i = torch.arange(rotary_dim // 2, dtype=torch.float64)
    exponent = {
        "standard": 2 * i / rotary_dim,
        "missing-step-2": i / rotary_dim,
        "positive-exponent": -2 * i / rotary_dim,
        "head-dim-denominator": 2 * i / (head_dim or rotary_dim),
    }[variant]
    return base ** (-exponent)


def _cos_sin(freqs: torch.Tensor, layout: Style) -> tuple[torch.Tensor, torch.Tensor]:
    """(…, r/2) angles -> (…, r) cos and sin laid out for one convention."""
    emb = torch.cat([freqs, freqs], dim=-1) if layout == "half" else freqs.repeat_interleave(2, dim=-1)
    return emb.cos(), emb.sin()


def _rotate_partner(x: torch.Tensor, pairing: Style) -> torch.Tensor:
    """The "-partner" term: rotate_half for half-split, (-x1, x0) pairs for interleaved."""
    if pairing == "half":
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([-x2, x1], dim=-1)
    pairs = x.unflatten(-1, (-1, 2))
    return torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).flatten(-2)


def apply_rope(
    x: torch.Tensor,
    positions: torch.Tensor,
    spec: RopeSpec,
    *,
    sign: float = 1.0,
    layout: Style | None = None,
    frequencies: InvFreq = "standard",
) -> torch.Tensor:
    """Rotate (b, h, s, dh) by the positions ((s,) or (b, s)); the keywords are mistakes.

    With the defaults this is the reference of ``spec``. ``sign=-1`` rotates the
    wrong way; ``layout`` builds cos/sin for the other convention than the pairing
    (rotate_half with interleaved cos/sin, or the reverse); ``frequencies`` picks a
    wrong inv_freq.
    """
    head_dim = x.shape[-1]
    r = spec.width(head_dim)
    freqs = positions.to(torch.float64).unsqueeze(-1) * spec.inv_freq(head_dim, frequencies)
    cos, sin = _cos_sin(freqs, layout or spec.style)
    cos, sin = cos * spec.attention_factor, sin * spec.attention_factor
    if cos.dim() == 3:  # (b, s, r) -> (b, 1, s, r): one rotation shared by the heads
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    rot, rest = x[..., :r], x[..., r:]
    rotated = rot * cos + _rotate_partner(rot, spec.style) * (sign * sin)
    return torch.cat([rotated, rest], dim=-1)


def rope_hook(
    spec: RopeSpec, q_positions: torch.Tensor, k_positions: torch.Tensor
) -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """The ``rope=`` argument of ``reference.mha``: rotate q and k at their positions."""

    def rotate(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return apply_rope(q, q_positions, spec), apply_rope(k, k_positions, spec)

    return rotate


def relative_shift_error(images: torch.Tensor, max_shift: int = 2, keys: torch.Tensor | None = None) -> float:
    """How far q·k after rotation depends on absolute positions, from the fingerprint.

    ``images[p]`` is the rotation at position p as a matrix (row j = image of e_j), so
    the score of q at p and k at p' is ``q R_p R_p'^T k``; RoPE's defining property
    is that ``R_p R_p'^T`` depends only on ``p' - p``. Returns the largest change of
    that matrix under shifting both positions by 1..max_shift (0 for a true RoPE).
    ``keys``: the images of k's rotation when it is not q's (a function that rotates both).
    """
    keys = images if keys is None else keys
    count = images.shape[0]
    worst = 0.0
    for shift in range(1, max_shift + 1):
        for p in range(count - shift):
            for p2 in range(count - shift):
                here = images[p] @ keys[p2].T
                shifted = images[p + shift] @ keys[p2 + shift].T
                worst = max(worst, float((here - shifted).abs().max()))
    return worst


def basis_inputs(head_dim: int, max_position: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The probe for the user's rotation: e_0..e_{dh-1} at every position 0..P.

    Returns x of shape (1, dh, P+1, dh) (batch 1, one "head" per basis vector, the
    sequence axis carrying the positions) and positions (P+1,). The runner rotates x
    with the user's code and gives the result to :func:`fingerprint` unchanged.
    """
    eye = torch.eye(head_dim, dtype=torch.float64)
    x = eye[:, None, :].expand(head_dim, max_position + 1, head_dim).unsqueeze(0).contiguous()
    return x, torch.arange(max_position + 1)


@dataclass(frozen=True)
class Fingerprint:
    """A rotation read back from basis vectors, named against the two conventions."""

    convention: Literal["half", "interleaved", "unknown"]
    rotary_dim: int
    partners: tuple[int, ...]  # partners[j]: the dim e_j rotates into (j itself when it does not rotate)
    frequencies: tuple[float, ...]  # angle per position of each rotating pair, in pair order
    base: float | None  # fit of frequencies = base^(-2i/r); None when they do not follow it
    sign: int  # +1: e_lo turns towards +e_hi (both conventions); -1: flipped; 0: unclear
    code: str | None  # "ATT402" when it is not a correct RoPE of either convention
    message: str


def _partners(images: torch.Tensor, tol: float) -> tuple[int, ...]:
    """Dim j's partner: the other dim its images reach most (j itself when none)."""
    reach = images.abs().sum(dim=0).clone()  # (dh, dh): mass of e_j's images on dim k
    reach.fill_diagonal_(0.0)
    best = reach.argmax(dim=1)
    moved = reach.max(dim=1).values > tol
    return tuple(int(best[j]) if moved[j] else j for j in range(images.shape[1]))


def _expected_partners(style: Style, rotary_dim: int, head_dim: int) -> tuple[int, ...]:
    half = rotary_dim // 2
    if style == "half":
        rotating = [j + half if j < half else j - half for j in range(rotary_dim)]
    else:
        rotating = [j ^ 1 for j in range(rotary_dim)]
    return tuple(rotating + list(range(rotary_dim, head_dim)))


def _pairs(convention: Style, rotary_dim: int) -> list[tuple[int, int]]:
    half = rotary_dim // 2
    if convention == "half":
        return [(i, i + half) for i in range(half)]
    return [(2 * i, 2 * i + 1) for i in range(half)]


def _fit_base(freqs: list[float], rotary_dim: int) -> float | None:
    """Base of freqs = base^(-2i/r) when the fit is exact enough; None otherwise."""
    if len(freqs) < 2 or any(f <= 0 for f in freqs) or abs(freqs[0] - 1.0) > 1e-6:
        return None
    xs = [2 * i / rotary_dim for i in range(len(freqs))]
    ys = [math.log(f) for f in freqs]
    slope = sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)
    if slope >= 0 or max(abs(slope * x - y) for x, y in zip(xs, ys, strict=True)) > 1e-6:
        return None
    return math.exp(-slope)


def _rotation_defects(images: torch.Tensor, pairs: list[tuple[int, int]], tol: float) -> tuple[list[float], int, bool]:
    """Per pair: the angle per position (from p=1), the sign, and whether every
    position is an exact 2-D rotation by p times that angle."""
    freqs, signs, exact = [], set(), True
    positions = torch.arange(images.shape[0], dtype=torch.float64)
    for lo, hi in pairs:
        cos, sin_lo = images[:, lo, lo], images[:, lo, hi]
        sin_hi, cos_hi = images[:, hi, lo], images[:, hi, hi]
        angle = math.atan2(abs(float(sin_lo[1])), float(cos[1]))
        signs.add(int(math.copysign(1, float(sin_lo[1]))) if abs(float(sin_lo[1])) > tol else 0)
        step = math.copysign(angle, float(sin_lo[1]))
        want_cos, want_sin = torch.cos(positions * step), torch.sin(positions * step)
        exact &= bool(
            torch.allclose(cos, want_cos, atol=tol)
            and torch.allclose(cos_hi, want_cos, atol=tol)
            and torch.allclose(sin_lo, want_sin, atol=tol)
            and torch.allclose(sin_hi, -want_sin, atol=tol)
        )
        freqs.append(angle)
    signs.discard(0)
    sign = signs.pop() if len(signs) == 1 else 0
    return freqs, sign, exact


def fingerprint(images: torch.Tensor, expected: RopeSpec | None = None, tol: float = 1e-5) -> Fingerprint:
    """Name the rotation whose images of e_j at positions 0..P are ``images``.

    ``images`` is (P+1, dh, dh) (or the (1, dh, P+1, dh) output of rotating
    :func:`basis_inputs`): ``images[p, j]`` is the rotated e_j at position p.
    ``expected`` (when known, e.g. from the model config) adds the check that the
    base and rotary width are the ones the weights were trained with.
    """
    if images.dim() == 4:
        images = images[0].transpose(0, 1)
    images = images.to(torch.float64)
    if images.dim() != 3 or images.shape[1] != images.shape[2] or images.shape[0] < 3:
        raise ValueError("fingerprint needs images of shape (P+1, head_dim, head_dim) with P >= 2")
    head_dim = images.shape[1]
    partners = _partners(images, tol)
    rotary_dim = sum(1 for j, k in enumerate(partners) if j != k)
    convention: Literal["half", "interleaved", "unknown"] = "unknown"
    for style in ("half", "interleaved"):
        if partners == _expected_partners(style, rotary_dim, head_dim) and rotary_dim % 2 == 0:
            convention = style
            break
    if convention == "unknown":
        return Fingerprint(
            convention,
            rotary_dim,
            partners,
            (),
            None,
            0,
            "ATT402",
            f"dims rotate with partners {list(partners)}, which is neither half-split (i with i + r/2) "
            "nor interleaved (2i with 2i+1): the rotation pairs the wrong dims; use rotate_half with "
            "cos/sin built as cat(freqs, freqs), or interleaved pairs with repeat_interleave(freqs, 2)",
        )
    freqs, sign, exact = _rotation_defects(images, _pairs(convention, rotary_dim), tol)
    base = _fit_base(freqs, rotary_dim)
    found = Fingerprint(convention, rotary_dim, partners, tuple(freqs), base, sign, None, "")
    return _judge(found, exact, expected, head_dim)


def _judge(found: Fingerprint, exact: bool, expected: RopeSpec | None, head_dim: int) -> Fingerprint:
    """Attach the verdict: the first defect found, in the order a learner would fix them."""
    name = {"half": "half-split (rotate_half)", "interleaved": "interleaved pairs"}[found.convention]
    problems: list[str] = []
    if not exact:
        problems.append(
            f"the dims pair up like {name} but the angles are not one rotation per pair: cos/sin are laid "
            f"out for the other convention; build them as "
            + ("cat(freqs, freqs)" if found.convention == "half" else "repeat_interleave(freqs, 2)")
        )
    elif found.sign < 0:
        problems.append(
            "the rotation turns the wrong way: the lower dim of each pair must become "
            "x_lo * cos - x_hi * sin (rotate_half returns cat(-x2, x1), "
            "and the sum is x * cos + rotate_half(x) * sin)"
        )
    elif found.base is None:
        problems.append(
            "the frequencies "
            + ", ".join(f"{f:.4g}" for f in found.frequencies)
            + " do not follow base^(-2i/r): inv_freq = 1.0 / base ** (arange(0, r, 2) / r)"
        )
    elif expected is not None and not math.isclose(found.base, expected.base, rel_tol=1e-4):
        problems.append(
            f"the frequencies follow base {found.base:.6g} instead of {expected.base:g}: "
            "inv_freq = 1.0 / base ** (arange(0, r, 2) / r) (step 2, divided by the rotary width)"
        )
    elif expected is not None and found.rotary_dim != expected.width(head_dim):
        problems.append(
            f"{found.rotary_dim} dims rotate instead of {expected.width(head_dim)}: "
            "rotate exactly the first rotary_dim dims and pass the rest through"
        )
    if problems:
        return _with(found, "ATT402", problems[0])
    base = f", base {found.base:.6g}" if found.base is not None else ""
    return _with(found, None, f"a correct {name} rotation of {found.rotary_dim} of {head_dim} dims{base}")


def _with(found: Fingerprint, code: str | None, message: str) -> Fingerprint:
    return replace(found, code=code, message=message)


def value_rotation_code(output: torch.Tensor, output_shifted: torch.Tensor, tol: float) -> str | None:
    """ATT404 when shifting every position by a constant changes the module's output.

    With RoPE on q and k only, scores depend on relative positions, so the output
    cannot move; rotating V as well makes it move.
    """
    return "ATT404" if float((output - output_shifted).abs().max()) > tol else None
