"""The low-precision rule of the catalogue (ATT909, ATT302).

A float16/bfloat16 attention is judged like flash-attn's tests judge theirs: it
passes when ``max|out - ref| <= 2 * max|naive - ref| + 2 * floor``, where ``ref``
is the float64 reference, ``naive`` the same reference computed in the low
precision, and ``floor`` the rounding unit of the dtype times ``max|ref|``. A fixed
absolute tolerance would hide real mistakes: 1/sqrt(d_model) instead of
1/sqrt(head_dim) moves the output by as little as 0.08. In float32/float64 the
rule is ``max(1e-5, 2 * max|naive - ref|)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from attncheck.dynamic import codes
from attncheck.dynamic.reference.mha import Linear, Projections, RopeHook, mha
from attncheck.dynamic.reference.mutants import Case, Setting

ROUNDING_UNIT = {
    torch.float16: 2.0**-10,
    torch.bfloat16: 2.0**-7,
    torch.float32: 2.0**-23,
    torch.float64: 2.0**-52,
}
"""Relative rounding unit (spacing of the mantissa) of each floating dtype."""

_LOW = (torch.float16, torch.bfloat16)
_OVERFLOW = re.compile(r"cannot be converted to (type )?c10::(Half|BFloat16) without overflow")
"""torch's message for ``masked_fill(-1e9)`` on float16."""


def rounding_floor(dtype: torch.dtype, reference: torch.Tensor) -> float:
    """The smallest error a dtype must be allowed: its rounding unit times max|ref|."""
    if dtype not in ROUNDING_UNIT:
        raise ValueError(f"no rounding unit for {dtype}; expected float16, bfloat16, float32 or float64")
    return ROUNDING_UNIT[dtype] * float(reference.abs().max())


def _max_error(a: torch.Tensor, b: torch.Tensor, rows: torch.Tensor | None) -> float:
    diff = (a.to(torch.float64) - b.to(torch.float64)).abs()
    if rows is not None:
        diff = diff[rows]
    return float(diff.max()) if diff.numel() else 0.0


def tolerance(
    dtype: torch.dtype, reference: torch.Tensor, naive: torch.Tensor, rows: torch.Tensor | None = None
) -> float:
    """The allowed max|out - ref| in ``dtype``; ``rows`` (b, q) selects the compared rows."""
    naive_error = _max_error(naive, reference, rows)
    if dtype in _LOW:
        compared = reference if rows is None else reference[rows]
        return 2 * naive_error + 2 * rounding_floor(dtype, compared)
    return max(1e-5, 2 * naive_error)


def _cast(lin: Linear | None, dtype: torch.dtype) -> Linear | None:
    if lin is None:
        return None
    return Linear(lin.weight.to(dtype), None if lin.bias is None else lin.bias.to(dtype))


def naive_reference(
    case: Case, setting: Setting, dtype: torch.dtype, rope: RopeHook | None = None
) -> torch.Tensor:
    """``reference.mha`` computed in ``dtype`` (inputs and weights cast), as float64.

    ``rope`` is the rotary hook (``rope.rope_hook``) when the module has one; it is
    applied to the low-precision q and k and its result cast back to ``dtype``.
    """
    proj = Projections(*(_cast(getattr(setting.proj, p), dtype) for p in ("q", "k", "v", "o")))
    rotate_in_dtype = None
    if rope is not None:

        def rotate_in_dtype(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            rq, rk = rope(q.to(torch.float64), k.to(torch.float64))
            return rq.to(dtype), rk.to(dtype)

    out = mha(
        case.query.to(dtype),
        case.key.to(dtype),
        case.value.to(dtype),
        proj,
        setting.num_heads,
        num_kv_heads=setting.num_kv_heads,
        keep=case.keep,
        causal=case.causal,
        rope=rotate_in_dtype,
    )
    return out.to(torch.float64)


@dataclass(frozen=True)
class Verdict:
    """Pass, or the catalogue code with the numbers that justify it."""

    passed: bool
    code: str | None  # None, "ATT909" (accuracy) or "ATT302" (overflow)
    error: float
    allowed: float
    message: str


def judge(
    output: torch.Tensor,
    reference: torch.Tensor,
    naive: torch.Tensor,
    dtype: torch.dtype,
    rows: torch.Tensor | None = None,
) -> Verdict:
    """Judge a module's ``dtype`` output against the float64 reference and the naive one.

    ``rows`` (b, q) bool selects the compared query rows (fully masked rows excluded).
    """
    allowed = tolerance(dtype, reference, naive, rows)
    out = output if rows is None else output[rows]
    if out.isinf().any() or out.isnan().any():
        kind = "inf" if bool(out.isinf().any()) else "NaN"
        return Verdict(
            False,
            "ATT302",
            float("inf"),
            allowed,
            f"the {_name(dtype)} output holds {kind} where the reference is finite: a value overflowed "
            f"(a -1e9 mask fill, or scores beyond {torch.finfo(dtype).max:.6g}); fill with "
            "torch.finfo(scores.dtype).min",
        )
    error = _max_error(output, reference, rows)
    if error <= allowed:
        return Verdict(True, None, error, allowed, f"{_name(dtype)} error {error:.3g} within {allowed:.3g}")
    naive_error = _max_error(naive, reference, rows)
    return Verdict(
        False,
        codes.LOW_PRECISION,
        error,
        allowed,
        f"in {_name(dtype)} the output is {error:.3g} from the float64 reference, where a naive "
        f"{_name(dtype)} attention is {naive_error:.3g} away (allowed {allowed:.3g}: twice that plus "
        "twice the rounding floor)",
    )


def exception_verdict(message: str, dtype: torch.dtype) -> Verdict | None:
    """ATT302 for the float16 overflow error of ``masked_fill(-1e9)``; None for other errors."""
    if _OVERFLOW.search(message):
        return Verdict(
            False,
            "ATT302",
            float("inf"),
            0.0,
            f"{_name(dtype)} forward raised {message.strip().splitlines()[0]!r}: the mask fill value "
            f"overflows {_name(dtype)} (max {torch.finfo(dtype).max:.6g}); "
            "fill with torch.finfo(scores.dtype).min",
        )
    return None


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")

