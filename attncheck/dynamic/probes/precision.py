"""The dtype user code sees, and the one it is judged in.

The module runs on float32 inputs with float32 weights, as in its author's own test: float64
inputs told the checker apart from a user's run (issue 17), and made code that is right in float32
wrong in float64 (MPT fills masked scores with ``finfo(query.dtype).min`` and takes the softmax of
``scores.float()``: float64's minimum becomes -inf there, and fully masked rows NaN).

The judging stays exact: the parent sends each planned input as float32 and computes every
reference in float64 from those same float32 values (and the float32 weights the child reports),
so the only difference left is the module's own float32 arithmetic. The catalogue's tolerance for a
float32 output is max(1e-5, 2x the error of a naive float32 reference); at the probes' sizes that
naive error is about 1e-7 (``tests/test_dynamic_probes_precision.py`` measures it), so the 1e-5
floor is the tolerance.
"""

from __future__ import annotations

import numpy as np
import torch

from attncheck.dynamic.reference.tolerance import tolerance

INPUT_DTYPE = torch.float32
TOLERANCE = tolerance(INPUT_DTYPE, 0.0)


def as_sent(array: np.ndarray) -> np.ndarray:
    """A planned input as the child receives it: floating arrays in float32, masks and positions as planned."""
    return array.astype(np.float32) if array.dtype == np.float64 else array


def as_judged(array: np.ndarray) -> torch.Tensor:
    """A planned input as the parent's references read it: the float32 values the module saw, in float64."""
    sent = torch.from_numpy(as_sent(array))
    return sent.double() if sent.is_floating_point() else sent


def scaled_tolerance(output: torch.Tensor) -> float:
    """The tolerance of an output whose values reach beyond 1 (a probe's scaled inputs): float32's
    rounding grows with the values, so the 1e-5 floor grows with the largest of them."""
    largest = float(output.abs().max()) if output.numel() else 0.0
    return TOLERANCE * max(1.0, largest if largest == largest else 1.0)  # NaN: the floor
