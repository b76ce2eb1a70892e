"""Child side of the KV-cache probe: a (k, v) cache for a prefix, cut from the module's own projections.

The module is run once on the prefix with a forward hook on every projection;
the outputs of the projections that read the prefix are its Q, K and V. The
cache is the K and V parts laid out as most hand-written and HF-legacy code
keeps it: a tuple ``(k, v)``, each (batch, n_kv_heads, prefix_len, head_dim).
Which layer is K and which V is told by structure (a fused QKV or KV layer,
else call order, with layer names breaking ties); the parent checks the cut
against the K/V projections it identified, so a wrong guess becomes a skip,
never a finding.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

Seen = list[tuple[str, torch.Tensor]]  # (layer name, output) of projections that read the prefix, in call order

_VALUE_NAME = re.compile(r"(^|[._])(w_?)?v(alue)?(_proj)?$|value", re.IGNORECASE)
_KEY_NAME = re.compile(r"(^|[._])(w_?)?k(ey)?(_proj)?$|key", re.IGNORECASE)


class CacheBuildError(RuntimeError):
    """No K/V could be cut from the projections that read the prefix."""


@contextlib.contextmanager
def capture(module: nn.Module, prefix: torch.Tensor, is_projection: Callable[[nn.Module], bool]) -> Iterator[Seen]:
    """Record the outputs of the projections that read ``prefix`` while the block runs."""
    seen: Seen = []

    def hook_for(name: str) -> Callable[..., None]:
        def hook(layer: nn.Module, args: tuple, output: Any) -> None:
            if args and _same_storage(args[0], prefix) and isinstance(output, torch.Tensor):
                seen.append((name, output.detach()))

        return hook

    handles = [
        layer.register_forward_hook(hook_for(name)) for name, layer in module.named_modules() if is_projection(layer)
    ]
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


def _same_storage(tensor: Any, prefix: torch.Tensor) -> bool:
    """``tensor`` is the prefix or a view of it (a module may slice or reshape its input first)."""
    if not isinstance(tensor, torch.Tensor):
        return False
    return tensor.untyped_storage().data_ptr() == prefix.untyped_storage().data_ptr()


def _key_value(seen: Seen, d_model: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The (b, s, Hkv * dh) K and V outputs among the projections that read the prefix."""
    if len(seen) == 1:  # fused QKV: q first, then k and v of equal width
        fused = seen[0][1]
        d_kv, odd = divmod(fused.shape[-1] - d_model, 2)
        if d_kv <= 0 or odd:
            raise CacheBuildError(f"one projection of width {fused.shape[-1]} read the input: not Q, K and V")
        return fused[..., d_model : d_model + d_kv], fused[..., d_model + d_kv :]
    if len(seen) == 2:  # Q and a fused KV: the KV layer is the second call unless its name says Q
        (_, first), (second_name, second) = seen
        kv = first if re.search(r"(^|[._])(w_?)?q", second_name, re.IGNORECASE) else second
        half = kv.shape[-1] // 2
        return kv[..., :half], kv[..., half : 2 * half]
    named = [(name, out) for name, out in seen if _KEY_NAME.search(name) or _VALUE_NAME.search(name)]
    k = next((out for name, out in named if _KEY_NAME.search(name)), None)
    v = next((out for name, out in named if _VALUE_NAME.search(name) and not _KEY_NAME.search(name)), None)
    if k is None or v is None:  # names do not say: Q, K, V in call order
        k, v = seen[1][1], seen[2][1]
    return k, v


def _heads(x: torch.Tensor, head_dim: int) -> torch.Tensor:
    """(b, s, Hkv * dh) -> (b, Hkv, s, dh)."""
    b, s, width = x.shape
    if width % head_dim:
        raise CacheBuildError(f"a K/V width of {width} does not split into heads of {head_dim}")
    return x.reshape(b, s, width // head_dim, head_dim).transpose(1, 2).contiguous()


def cut(seen: Seen, d_model: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The legacy ``(k, v)`` cache from the recorded projection outputs of the prefix run."""
    if not seen:
        raise CacheBuildError("no projection read the input tokens, so there is no K/V to cache")
    k, v = _key_value(seen, d_model)
    if k.ndim != 3 or k.shape != v.shape:
        raise CacheBuildError(f"the K and V projections give different shapes {tuple(k.shape)}, {tuple(v.shape)}")
    return _heads(k, head_dim), _heads(v, head_dim)
