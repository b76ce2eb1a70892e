"""The reference's attention weights for the input the student's module saw first, for the report.

From the executor's record of the projections (which layer read the input, and its weights) the
query and key projections are taken as a textbook module lays them out: the first two layers that
read the input (or the first third and second third of a fused one). The reference weights are
then softmax(q kᵀ / sqrt(head_dim)) for batch 0, head 0, with the student's own projection
weights, so the two pictures differ only by the attention itself. None when the layout is not
that simple: the report then shows the student's weights alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

QUERY_ROLES, KEY_ROLES = ("x", "query"), ("x", "key", "kv")


def reference_weights(unit: Mapping[str, Any], facts: Mapping[str, Any], replied: Mapping[str, np.ndarray],
                      inputs: Mapping[str, np.ndarray], heads: int) -> list[list[float]] | None:
    """(query, key) weights of the reference for batch 0, head 0, or None."""
    experiments = unit.get("experiments") or []
    roles = dict(experiments[0].get("inputs", {})) if experiments else {}
    layers = facts.get("layers") or []
    if not layers or heads < 1:
        return None
    q_k = _fused(layers, roles, replied, inputs) or _separate(layers, roles, replied, inputs)
    if q_k is None:
        return None
    q, k = q_k
    if q.shape[-1] % heads or q.shape[-1] != k.shape[-1]:
        return None
    head_dim = q.shape[-1] // heads
    scores = q[:, :head_dim] @ k[:, :head_dim].T / math.sqrt(head_dim)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (scores / scores.sum(axis=-1, keepdims=True)).tolist()


def _input(roles: Mapping[str, str], inputs: Mapping[str, np.ndarray], role: str) -> np.ndarray | None:
    name = roles.get(role)
    return np.asarray(inputs[name], dtype=np.float64)[0] if name in inputs else None


def _fused(layers, roles, replied, inputs) -> tuple[np.ndarray, np.ndarray] | None:
    """One layer reading the single input, three times as wide as it: q, k, v side by side."""
    x = _input(roles, inputs, "x")
    readers = [i for i, layer in enumerate(layers) if layer.get("read") == "x"]
    if x is None or len(readers) != 1:
        return None
    out = _project(x, replied, readers[0])
    d_model = x.shape[-1]
    return (out[:, :d_model], out[:, d_model:2 * d_model]) if out.shape[-1] == 3 * d_model else None


def _separate(layers, roles, replied, inputs) -> tuple[np.ndarray, np.ndarray] | None:
    """The first layer reading the query (or the input), then the next reading the key (or the input)."""
    query = next((i for i, layer in enumerate(layers) if layer.get("read") in QUERY_ROLES), None)
    if query is None:
        return None
    key = next((i for i, layer in enumerate(layers) if i != query and layer.get("read") in KEY_ROLES), None)
    if key is None:
        return None
    x_q = _input(roles, inputs, layers[query]["read"])
    x_k = _input(roles, inputs, layers[key]["read"])
    if x_q is None or x_k is None:
        return None
    return _project(x_q, replied, query), _project(x_k, replied, key)


def _project(x: np.ndarray, replied: Mapping[str, np.ndarray], index: int) -> np.ndarray:
    out = x @ np.asarray(replied[f"layer{index}/weight"]).T
    bias = replied.get(f"layer{index}/bias")
    return out + np.asarray(bias) if bias is not None else out
