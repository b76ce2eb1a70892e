"""Child-side entry: the executor's experiments, plus the attention weights of the first forward.

The HTML report shows each student's attention weights beside the reference's for one input.
The executor records only what its probes need, so this entry wraps it (the request's
``entry``) with a torch function mode that keeps the output of the first softmax over a
(query, key) square it sees for each target: batch 0, head 0. It decides nothing and the
probes never read it; it runs inside the jailed child like the executor itself.
"""

from __future__ import annotations

import types
from collections.abc import Iterator

import torch
from torch.overrides import TorchFunctionMode

from attncheck.dynamic.inside import executor

ENTRY = "attncheck.dynamic.inside.weights_capture:run"
WEIGHTS = "grade/weights"
HEADS = "grade/heads"  # how many heads the captured softmax had (its dimension before the query axis)
_SOFTMAX = {torch.softmax, torch.nn.functional.softmax, torch.Tensor.softmax, torch.special.softmax}


class _FirstSoftmax(TorchFunctionMode):
    """Keeps the first softmax result with at least two dimensions (its last two: query x key)."""

    def __init__(self) -> None:
        super().__init__()
        self.weights: torch.Tensor | None = None
        self.heads = 1

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if self.weights is None and func in _SOFTMAX and isinstance(result, torch.Tensor) and result.ndim >= 2:
            first = result.detach()
            self.heads = first.shape[-3] if first.ndim >= 4 else 1
            while first.ndim > 2:
                first = first[0]
            self.weights = first.to("cpu", torch.float64).clone()
        return result


def run(module: types.ModuleType, request: dict, tensors: dict[str, torch.Tensor]) -> Iterator[tuple[dict, dict]]:
    """``executor.run``, each target's reply carrying its first attention weights when it had any."""
    capture = _FirstSoftmax()
    with capture:
        for facts, out in executor.run(module, request, tensors):
            if capture.weights is not None:
                out[WEIGHTS] = capture.weights
                out[HEADS] = torch.tensor([capture.heads], dtype=torch.float64)
            capture.weights = None
            yield facts, out
