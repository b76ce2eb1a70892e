"""Child side of the GQA head-dependency probe: perturb one KV head where the projections write it.

A forward hook on each projection adds fixed noise to the output columns of KV
head ``j``: the whole output of a K or V projection (width Hkv * dh), or the K
and V parts of a fused QKV (d + 2 Hkv dh) or KV (2 Hkv dh) projection. The
parent then sees which query heads moved (``probes_gqa``). Runs in the child,
so it touches nothing but the user's module for the duration of one experiment.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


def _slices(width: int, spec: dict[str, int]) -> list[slice]:
    """The output columns of KV head ``spec['head']`` in a projection of this width, if it writes K/V."""
    dh, kv, d, j = spec["head_dim"], spec["kv_heads"], spec["d_model"], spec["head"]
    d_kv = kv * dh
    if d_kv == d:  # as many KV heads as query heads: K/V cannot be told from Q by width
        return []
    head = slice(j * dh, (j + 1) * dh)
    if width == d_kv:
        return [head]
    if width == 2 * d_kv != d:  # a fused KV projection, unless Q has the same width
        return [head, slice(d_kv + j * dh, d_kv + (j + 1) * dh)]
    if width == d + 2 * d_kv:
        return [slice(d + j * dh, d + (j + 1) * dh), slice(d + d_kv + j * dh, d + d_kv + (j + 1) * dh)]
    return []


def install(module: nn.Module, spec: dict[str, int], is_projection: Callable[[nn.Module], bool]) -> list[Any]:
    """Hooks that perturb KV head ``spec['head']``; remove the returned handles after the experiment."""
    generator = torch.Generator().manual_seed(1000 + spec["head"])

    def hook(layer: nn.Module, args: tuple, output: Any) -> Any:
        if not isinstance(output, torch.Tensor):
            return None
        columns = _slices(output.shape[-1], spec)
        if not columns:
            return None
        changed = output.clone()
        for cols in columns:
            noise = torch.randn(changed[..., cols].shape, generator=generator, dtype=torch.float64)
            changed[..., cols] += noise.to(changed.device, changed.dtype)
        return changed

    return [layer.register_forward_hook(hook) for layer in module.modules() if is_projection(layer)]
