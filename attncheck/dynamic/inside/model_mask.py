"""Runs inside the child: the additive mask a model hands its attention layers, and the fill it uses.

A transformers attention class applies no causality of its own: it stores ``is_causal = True``
(and a ``sliding_window``) for the fused kernels, and in eager mode it adds the 4-D mask the
model built (``create_causal_mask``, ``create_sliding_window_causal_mask``) to its scores.
Checked alone with no mask, such a class is bidirectional, and a causal check would call that a
future leak. So, for a class bound with ``caller_mask``, every call gets the mask its model would
build, combined with the probe's own mask: what the class sees in its model.

The fill is ``torch.finfo(float32).min`` (a dtype's own min below that): real callers fill with
the min of the model's dtype, and code that casts its scores with ``.float()`` or runs its
softmax in float32 turns float64's min into -inf, so a fully masked row would become NaN where
the model's own mask gives a uniform row.
"""

from __future__ import annotations

from typing import Any

import torch


def fill(dtype: torch.dtype) -> float:
    """The most negative value an additive mask of ``dtype`` holds that also survives a float32 cast."""
    return max(float(torch.finfo(dtype).min), float(torch.finfo(torch.float32).min))


def _window(instance: Any) -> int | None:
    """The layer's sliding window: its own attribute (None on a full-attention layer), else its config's."""
    if hasattr(instance, "sliding_window"):
        window = instance.sliding_window
    else:
        window = getattr(getattr(instance, "config", None), "sliding_window", None)
    return window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None


def keep(instance: Any, q_len: int, k_len: int, device: torch.device) -> torch.Tensor | None:
    """(q, k) keys each query may see in the layer's model: causal (bottom-right aligned, as with a
    cache) when the layer says ``is_causal``, within a window of W keys when it has one; None: all."""
    causal, window = getattr(instance, "is_causal", False) is True, _window(instance)
    if not causal and window is None:
        return None
    i = torch.arange(q_len, device=device)[:, None] + (k_len - q_len)
    j = torch.arange(k_len, device=device)[None, :]
    allowed = j <= i if causal else torch.ones(q_len, k_len, dtype=torch.bool, device=device)
    if window is not None:
        allowed = allowed & (j > i - window)
    return allowed


def combined(instance: Any, probe: torch.Tensor | None, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor | None:
    """The model's 4-D additive mask with the probe's additive one inside it (where the model keeps a
    key, the probe's value; elsewhere the fill). A probe mask in another form (bool, not 4-D) goes as
    it is: the model would never pass one, and the probes find out that it is not taken."""
    dtype = query.dtype
    allowed = keep(instance, query.shape[-2], key.shape[-2], query.device)
    if allowed is None or (probe is not None and (probe.dtype == torch.bool or probe.ndim != 4)):
        return probe
    blocked = torch.full((), fill(dtype), dtype=dtype, device=query.device)
    base = torch.zeros((), dtype=dtype, device=query.device) if probe is None else probe.to(dtype)
    return torch.where(allowed[None, None], base, blocked)
