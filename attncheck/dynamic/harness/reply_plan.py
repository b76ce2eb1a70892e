"""A target's reply held against the parent's plan before any probe reads it.

``channel`` has bounded what was read and ``protocol.reply_facts`` typed the facts; this checks
that the facts and the tensors agree with each other and with what the parent asked for. The
experiments reported are ones it planned; each that ran has its output, in float64, of the shape
its facts state; each recorded projection has its weight (and the bias and columns-to-scores
flags its facts announce) of the stated size; and no tensor comes under a name the child has no
reason to send. A reply that breaks this would otherwise surface as a KeyError deep in a probe,
reported as attncheck's fault.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

FLOAT64 = "float64"
FREE_PREFIXES = ("declared/", "grade/")  # variant tensors (inside.variant_facts), the report's weights


def unplanned(facts: Mapping[str, Any], tensors: Mapping[str, Any], planned: Iterable[str]) -> str | None:
    """Why the reply does not fit the plan (one line), or None when it does."""
    names = set(planned)
    experiments = facts.get("experiments") or {}
    strangers = sorted(set(experiments) - names)
    if strangers:
        return f"the child's reply reports an experiment that was not asked for: {strangers[0][:60]!r}"
    for name, run in experiments.items():
        if run.get("ok"):
            wrong = _wrong(tensors, f"{name}/out", run.get("shape"))
            if wrong:
                return wrong
    layers = facts.get("layers") or []
    for index, layer in enumerate(layers):
        wrong = _wrong(tensors, f"layer{index}/weight", [layer["out"], layer["in"]])
        bias = tensors.get(f"layer{index}/bias")
        if not wrong and (bias is not None) != layer["bias"]:
            wrong = f"the child's reply has a bias for layer {index} that its facts do not state, or lacks one"
        if not wrong and bias is not None:
            wrong = _wrong(tensors, f"layer{index}/bias", [layer["out"]])
        if not wrong and (f"layer{index}/to_scores" in tensors) != layer.get("to_scores", False):
            wrong = f"the child's reply has a score flow for layer {index} that its facts do not state, or lacks one"
        if not wrong and layer.get("to_scores"):
            wrong = _wrong(tensors, f"layer{index}/to_scores", [layer["out"]])
        if wrong:
            return wrong
    layer_names = {f"layer{index}/{part}" for index in range(len(layers)) for part in ("weight", "bias", "to_scores")}
    for tensor in tensors:
        known = tensor in layer_names or tensor.startswith(FREE_PREFIXES)
        if not known and not any(tensor.startswith(f"{name}/") for name in names):
            return f"the child's reply carries a tensor that was not asked for: {tensor[:60]!r}"
    return None


def _wrong(tensors: Mapping[str, Any], name: str, shape: Any) -> str | None:
    """Why tensor ``name`` is missing or not a float64 tensor of ``shape``; None when it is."""
    tensor = tensors.get(name)
    if tensor is None:
        return f"the child's reply lacks the tensor {name!r}"
    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype != FLOAT64:
        return f"the child's reply has {name!r} in {dtype}, not {FLOAT64}"
    if list(tensor.shape) != list(shape or []):
        return f"the child's reply has {name!r} of shape {list(tensor.shape)}, where its facts say {shape}"
    return None
