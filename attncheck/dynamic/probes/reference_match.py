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

from attncheck.dynamic import codes
from attncheck.dynamic.binding.weights import Assignment, assignments, layers_from
from attncheck.dynamic.diagnosis import explain, forms
from attncheck.dynamic.probes.base import (
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
    got, expected = view.plain_shape(), view.expected_shape()
    fitted = view.pooling is not None and view.fit is not None and view.fit.error <= view.tol
    detail = f"output shape {got}, expected {expected}"
    if fitted and view.pooling is not None:
        detail += f" ({view.pooling.text})"
    pooled = None if got == expected else unmodelled.own_queries(view.facts.get("softmax"), got, expected)
    if pooled:
        view.unmodelled = pooled
        return Check("output-shape", "skipped", f"{detail}: {pooled}"), None, ""
    return outcome("output-shape", got == expected, detail, codes.OUTPUT_SHAPE,
                   f"output shape {got} differs from the expected {expected}")


def _reference(view: JudgeView) -> Outcome:
    assert view.fit is not None
    q_len, k_len = view.lengths()
    kind = {
        "self": "self-attention",
        "cross": f"cross-attention (query length {q_len}, key length {k_len})",
        "function": f"attention on (b, h, s, dh) (query length {q_len}, key length {k_len})",
    }[view.style]
    errors = [(kind, view.fit.error)]
    if view.style != "self" and view.ran("self"):
        errors.append(("self-attention", max_error(view.output("self"), view.reference("self", None, view.fit))))
    worst_kind, worst = max(errors, key=lambda pair: pair[1])
    detail = "; ".join(f"{k}: max error {e:.3g}" for k, e in errors) + f" (tolerance {view.tol:g}); "
    detail += view.describe_fit()
    if worst <= view.tol:
        return Check("reference", "passed", detail), None, ""
    found = forms.diagnose(view) if view.fit.form is not None else explain.diagnose_judge(view, ["plain", "self"])
    if found is not None:
        return Check("reference", "failed", f"{detail}; {found.detail}"), found.code, found.message
    why = _unmodelled_construct(view)
    if why:
        view.unmodelled = f"{why} ({detail})"
        return Check("reference", "skipped", view.unmodelled), None, ""
    return (
        Check("reference", "failed", detail),
        codes.REFERENCE_MISMATCH,
        f"output differs from the reference by {worst:.3g} (tolerance {view.tol:g}) on {worst_kind}",
    )


def _unmodelled_construct(view: JudgeView) -> str:
    """Why the reference cannot model the plain output ('' when it could have), a scale set on
    purpose included (``unmodelled.reason``, which every skip of a mismatch goes through); a pooling module
    that no rows of its input explain pools with queries of its own."""
    if view.pooling is not None:
        return unmodelled.own_queries_text(view.pooling.count)
    rescaled = None
    if "ATT201" not in view.static_codes and view.fit is not None and view.style != "function":
        query, key, value = view.role_inputs("plain")
        dims, causal = view.binding.dims, view.fit.causal
        layers = layers_from(view.facts.get("layers", []), view.out)

        def scaled(assignment: Assignment) -> unmodelled.Reference:
            return lambda scale: reference.mha(
                query, key, value, assignment.projections, dims.heads,
                num_kv_heads=assignment.kv_heads, causal=causal, scale=scale,
            )

        references = (scaled(a) for a in assignments(layers, dims.width, dims.heads))
        rescaled = unmodelled.Rescaled(view.output("plain"), references, dims.width // dims.heads, view.tol)
    return unmodelled.reason(view.facts, *view.lengths(), rescaled)


PROBE = FunctionProbe(
    "reference",
    (codes.OUTPUT_SHAPE, codes.REFERENCE_MISMATCH, *explain.DIAGNOSED_CODES),
    1,
    every_target,
    plans_nothing,
    judge,
)
