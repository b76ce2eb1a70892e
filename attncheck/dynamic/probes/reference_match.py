"""The reference probe: does the plain run have the expected shape, and does it equal the float64 reference?

The plain run (and, for a separate query input, the self-attention run "self" the leak probe
plans) is compared with the reference configuration that best explains it (``JudgeView.fit``:
its projections, causal alignment, RoPE and declared variant). Checks: "forward" (how the target
was bound), "output-shape" (ATT902) and "reference". A mismatch is named by the diagnosis
(mutated references) when one explains it; a construct the reference does not model (a softmax
over another axis, a scale no convention gives) skips the target with the reason; anything else
is ATT903.
"""

from __future__ import annotations

import torch

from attncheck.dynamic import codes
from attncheck.dynamic.binding.weights import Assignment, assignments, layers_from
from attncheck.dynamic.diagnosis import explain
from attncheck.dynamic.probes.base import (
    SEQ_K,
    SEQ_Q,
    FunctionProbe,
    JudgeView,
    Outcome,
    every_target,
    outcome,
    plans_nothing,
)
from attncheck.dynamic.reference import mha as reference
from attncheck.dynamic.reference import unmodelled
from attncheck.dynamic.reference.tolerance import max_error
from attncheck.findings import Check


def judge(view: JudgeView) -> list[Outcome]:
    """forward, output-shape, and reference when a reference configuration was fitted."""
    neutral = view.facts.get("neutral_mask")
    mask = f"; the required mask, when no mask is tested: all-keep {neutral[1]} {neutral[0]}" if neutral else ""
    found: list[Outcome] = [(Check("forward", "passed", f"bound with {view.facts.get('binding')}{mask}"), None, "")]
    found.append(_shape(view))
    if view.fit is not None:
        found.append(_reference(view))
    return found


def _shape(view: JudgeView) -> Outcome:
    got, expected = tuple(view.facts["experiments"]["plain"]["shape"]), view.expected_shape()
    detail = f"output shape {got}, expected {expected}"
    return outcome("output-shape", got == expected, detail, codes.OUTPUT_SHAPE,
                   f"output shape {got} differs from the expected {expected}")


def _reference(view: JudgeView) -> Outcome:
    assert view.fit is not None
    kind = {
        "self": "self-attention",
        "cross": f"cross-attention (query length {SEQ_Q}, key length {SEQ_K})",
        "function": f"attention on (b, h, s, dh) (query length {SEQ_Q}, key length {SEQ_K})",
    }[view.style]
    errors = [(kind, view.fit.error)]
    if view.style != "self" and view.ran("self"):
        errors.append(("self-attention", max_error(view.output("self"), view.reference("self", None, view.fit))))
    worst_kind, worst = max(errors, key=lambda pair: pair[1])
    detail = "; ".join(f"{k}: max error {e:.3g}" for k, e in errors) + f" (tolerance {view.tol:g}); "
    detail += view.describe_fit()
    if worst <= view.tol:
        return Check("reference", "passed", detail), None, ""
    found = explain.diagnose_judge(view, ["plain", "self"])
    if found is not None:
        return Check("reference", "failed", f"{detail}; {found.detail}"), found.code, found.message
    view.unmodelled = _unmodelled_construct(view)
    if view.unmodelled:
        return Check("reference", "skipped", f"{detail}; {view.unmodelled}"), None, ""
    return (
        Check("reference", "failed", detail),
        codes.REFERENCE_MISMATCH,
        f"output differs from the reference by {worst:.3g} (tolerance {view.tol:g}) on {worst_kind}",
    )


def _unmodelled_construct(view: JudgeView) -> str:
    """Why the reference cannot model the plain output ('' when it could have)."""
    query, key, value = view.role_inputs("plain")
    axis = unmodelled.other_axis(view.facts.get("softmax"), query.shape[-2], key.shape[-2])
    if axis or "ATT201" in view.static_codes or view.fit is None or view.style == "function":
        return axis or ""
    dims, causal = view.binding.dims, view.fit.causal
    head_dim = dims.width // dims.heads
    layers = layers_from(view.facts.get("layers", []), view.out)
    for assignment in assignments(layers, dims.width, dims.heads):

        def scaled(scale: float, assignment: Assignment = assignment) -> torch.Tensor:
            return reference.mha(
                query, key, value, assignment.projections, dims.heads,
                num_kv_heads=assignment.kv_heads, causal=causal, scale=scale,
            )

        factor = unmodelled.fitted_scale(view.output("plain"), scaled, head_dim, view.tol)
        if factor is not None:
            return unmodelled.scale_text(factor, head_dim)
    return ""


PROBE = FunctionProbe(
    "reference",
    (codes.OUTPUT_SHAPE, codes.REFERENCE_MISMATCH, *explain.DIAGNOSED_CODES),
    1,
    every_target,
    plans_nothing,
    judge,
)
