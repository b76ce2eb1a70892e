"""Entry functions the sandbox tests run inside the child (``request["entry"]``).

Each has the executor's signature: ``entry(module, request, tensors)`` yields
``(facts, tensors)`` pairs, one per finished unit.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from types import ModuleType

import torch

from attncheck.dynamic.inside import executor  # bound before the child's disguise, as its own entry is

Units = Iterator[tuple[dict, dict[str, torch.Tensor]]]


def echo(module: ModuleType, request: dict, tensors: dict[str, torch.Tensor]) -> Units:
    """Every input back, unchanged, one unit each: the round trip must be exact."""
    for name, tensor in tensors.items():
        yield {"unit": f"echo:{name}", "dtype": str(tensor.dtype)}, {name: tensor}


def forward(module: ModuleType, request: dict, tensors: dict[str, torch.Tensor]) -> Units:
    """``module.Attention()`` on the input "x"; its output and what the child's torch says."""
    with torch.no_grad():
        out = module.Attention()(tensors["x"])
    facts = {"unit": "forward", "shape": list(out.shape), "allclose_to_zero": torch.allclose(out, out * 0)}
    yield facts, {"out": out}


def echo_then_forward(module: ModuleType, request: dict, tensors: dict[str, torch.Tensor]) -> Units:
    """A first unit that surely finishes, then the user's forward (which may crash)."""
    yield from echo(module, request, tensors)
    yield from forward(module, request, tensors)


def leaks(module: ModuleType, request: dict, tensors: dict[str, torch.Tensor]) -> Units:
    """What the user's module saw of the environment, and the child's own view."""
    yield {"unit": "leaks", "module_saw": module.SEEN, "child_env": sorted(os.environ)}, {}


def round_trip(module: ModuleType, request: dict, tensors: dict[str, torch.Tensor]) -> Units:
    """Every input back, "x" as bfloat16 (a dtype numpy cannot hold), then the forward."""
    yield from echo(module, request, tensors)
    yield {"unit": "bfloat16"}, {"x16": tensors["x"].to(torch.bfloat16)}
    yield from forward(module, request, tensors)


def forward_then_report(module: ModuleType, request: dict, tensors: dict[str, torch.Tensor]) -> Units:
    """The user's forward, then what the hostile module recorded (``REPORT``, ``STARTED`` threads)."""
    yield from forward(module, request, tensors)
    started = len(getattr(module, "STARTED", []))
    yield {"unit": "report", "report": getattr(module, "REPORT", None), "started": started}, {}


def executor_then_report(module: ModuleType, request: dict, tensors: dict[str, torch.Tensor]) -> Units:
    """The real executor's run of the request, then what the hostile module recorded (``REPORT``)."""
    yield from executor.run(module, request, tensors)
    yield {"unit": "report", "report": getattr(module, "REPORT", None)}, {}
