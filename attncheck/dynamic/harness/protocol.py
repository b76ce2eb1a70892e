"""What crosses the process boundary for one experiment, typed on both sides.

The parent plans ``Experiment`` objects (``probes.judge.plan``, ``probes.rope_functions.plan``),
the request carries them as plain JSON (``to_request``), and the child reads them back
(``from_request``) before it runs one. Every option is a field with its default, so neither side
tests for optional keys. Tensors travel by name: the values are in ``inputs.safetensors``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Experiment:
    """One call of a target: its inputs and how to make the instance and the call."""

    name: str
    inputs: dict[str, str]  # forward role -> tensor name
    mask: str | None = None  # tensor name of the mask argument
    instance: str = "exact"  # "exact", "dropout" or a low-precision dtype name: which instance runs
    mode: str = "eval"  # "eval" or "train"
    dtype: str | None = None  # "float16" / "bfloat16": inputs lowered to it
    record: bool = False  # record the projections and softmax calls (the plain run)
    cotangent: str | None = None  # tensor name: backpropagate output * cotangent for the gradients
    perturb_kv: dict[str, int] | None = None  # inside.kv_perturb's spec: kv_heads, head_dim, d_model, head
    kv_cache: dict[str, Any] | None = None  # inside.kv_cache's spec: param, prefix, d_model, head_dim
    keywords: dict[str, str] = field(default_factory=dict)  # forward parameter -> tensor name
    constants: dict[str, Any] = field(default_factory=dict)  # forward parameter -> JSON value
    all_outputs: bool = False  # keep every returned tensor, not only the first
    variant: str | None = None  # inside.variant_runs' term: run only when the module declares it

    def to_request(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "inputs": self.inputs,
            "mask": self.mask,
            "instance": self.instance,
            "mode": self.mode,
            "dtype": self.dtype,
            "record": self.record,
            "cotangent": self.cotangent,
            "perturb_kv": self.perturb_kv,
            "kv_cache": self.kv_cache,
            "keywords": self.keywords,
            "constants": self.constants,
            "all_outputs": self.all_outputs,
            "variant": self.variant,
        }

    @classmethod
    def from_request(cls, request: dict[str, Any]) -> Experiment:
        """Read back ``to_request``'s dict; a key it lacks takes the field's default."""
        return cls(**request)
