"""How close is close enough: the catalogue's tolerances, in one place.

float32/float64: the output must match the float64 reference within
max(1e-5, 2x the error of a naive same-dtype reference). float16/bfloat16:
flash-attn's rule, 2x the naive low-precision error plus twice the rounding
floor. A fixed absolute tolerance alone would hide a wrong scale whose error is
small, so the naive error is always measured, never assumed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

ABSOLUTE_FLOOR = 1e-5
LOW_PRECISION = (torch.float16, torch.bfloat16)


def rounding_floor(dtype: torch.dtype) -> float:
    """Half an ulp at 1.0: the smallest error a value of order one can carry in ``dtype``."""
    return float(torch.finfo(dtype).eps) / 2


def tolerance(dtype: torch.dtype, naive_error: float) -> float:
    """The largest acceptable max-abs error for an output computed in ``dtype``."""
    if dtype in LOW_PRECISION:
        return 2 * naive_error + 2 * rounding_floor(dtype)
    return max(ABSOLUTE_FLOOR, 2 * naive_error)


def naive_error(
    reference: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...], dtype: torch.dtype
) -> float:
    """Error of the reference itself when run in ``dtype`` (0 for float64)."""
    exact = reference(*(t.double() if t.is_floating_point() else t for t in inputs))
    if dtype == torch.float64:
        return 0.0
    lowered = reference(*(t.to(dtype) if t.is_floating_point() else t for t in inputs))
    return max_error(lowered.double(), exact)


def max_error(output: torch.Tensor, reference: torch.Tensor, skip_rows: torch.Tensor | None = None) -> float:
    """max |output - reference| over (b, s, ...) rows not in ``skip_rows`` (b, s); NaN counts as inf."""
    if output.shape != reference.shape:
        return float("inf")
    diff = (output.double() - reference.double()).abs()
    if skip_rows is not None and diff.ndim >= 2 and skip_rows.shape == diff.shape[:2]:
        diff = diff[~skip_rows]
    if diff.numel() == 0:
        return 0.0
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
    return float(diff.max())
