"""The leak probe: information flows only where attention lets it (within a batch element, from the past).

Each perturbs part of the input and checks that the outputs it must not reach stay put:
"batch-independence" (batch element 1 perturbed, element 0 must not move: ATT904),
"query-independence" for a separate query input (one query perturbed, the others must not
move: ATT905) or, for self-attention, "permutation-equivariance" (permuted tokens give the
permuted output unless the target is causal or positional: ATT905), and "causal" for a causal
target (tokens from ``FUTURE_FROM`` on perturbed, earlier outputs must not move: ATT906). For a
separate query input the future-leak input ``s`` is a self-attention input, and its unperturbed
run "self" is the reference probe's second case.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attncheck.dynamic import codes
from attncheck.dynamic.probes.base import (
    FunctionProbe,
    JudgeView,
    Outcome,
    Planner,
    every_target,
    outcome,
)
from attncheck.dynamic.probes.sizes import FUTURE_FROM, QUERY_PROBE
from attncheck.dynamic.reference import unmodelled
from attncheck.dynamic.reference.tolerance import max_error
from attncheck.findings import Check


def plan(planner: Planner) -> None:
    """Batch element 1 perturbed; a self-attention input with its future perturbed; its permutation
    (self-attention) or one query perturbed."""
    q_base, k_base, v_base = planner.arrays
    q, k, v = planner.names
    self_style = planner.binding.style == "self"
    batch = [
        planner.tensor(f"{n}_batch", planner.perturbed(t, (1,)))
        for n, t in (("q", q_base), ("k", k_base), ("v", v_base))
    ]
    planner.add(
        "batch",
        planner.inputs(batch[0], batch[0] if self_style else batch[1], batch[0] if self_style else batch[2]),
    )
    s_base = q_base if self_style else planner.random(planner.sizes.seq_self)
    s = q if self_style else planner.tensor("s", s_base)
    future = planner.tensor("s_future", planner.perturbed(s_base, (slice(None), slice(FUTURE_FROM, None))))
    planner.add("future", planner.inputs(future, future, future))
    if self_style:
        permutation = planner.rng.permutation(planner.sizes.seq_self)
        planner.keep["permutation"] = permutation
        permuted = planner.tensor("s_perm", np.take(s_base, permutation, axis=-2))
        planner.add("permuted", planner.inputs(permuted, permuted, permuted))
    else:
        planner.add("self", planner.inputs(s, s, s))
        query = planner.tensor("q_query", planner.perturbed(q_base, (slice(None), QUERY_PROBE)))
        planner.add("query", planner.inputs(query, k, v))


def judge(view: JudgeView) -> list[Outcome]:
    """batch-independence, query-independence (or permutation-equivariance), causal."""
    return [_batch_independence(view), _query_independence(view), _causal(view)]


def _unchanged(view: JudgeView, name: str, baseline: str, rows: Any) -> float | None:
    """How far the ``rows`` of experiment ``name`` moved from ``baseline``'s; None when either raised."""
    if not (view.ran(name) and view.ran(baseline)):
        return None
    changed, base = view.output(name)[rows], view.output(baseline)[rows]
    if changed.shape == base.shape:  # NaN in both is no change (a row with no visible key stays NaN)
        both = changed.isnan() & base.isnan()
        changed, base = changed.masked_fill(both, 0.0), base.masked_fill(both, 0.0)
    return max_error(changed, base)


def _within_tolerance(view: JudgeView, name: str, change: float, detail: str, code: str, leak: str) -> Outcome:
    """Passed when a perturbation moved the guarded outputs by at most the tolerance;
    else the finding ``code``, whose message is ``leak`` with the tolerance."""
    return outcome(name, change <= view.tol, detail, code, f"{leak} (tolerance {view.tol:g})")


def _batch_independence(view: JudgeView) -> Outcome:
    return _independence(
        view, "batch-independence", "batch", (slice(0, 1),), codes.BATCH_LEAK,
        "perturbing batch element 1 moves element 0",
        "batch elements leak into each other: changing element 1 moves element 0",
    )


def _query_independence(view: JudgeView) -> Outcome:
    if view.style == "self":
        return _permutation(view)
    return _independence(
        view, "query-independence", "query", (slice(None), [i for i in range(view.lengths()[0]) if i != QUERY_PROBE]),
        codes.QUERY_LEAK,
        f"perturbing query {QUERY_PROBE} moves the other queries' outputs",
        f"queries leak into each other: changing query {QUERY_PROBE} moves the other outputs",
    )


def _independence(view: JudgeView, name: str, experiment: str, rows: Any, code: str, moved: str, leak: str) -> Outcome:
    """Whether the guarded ``rows`` stayed put when ``experiment`` perturbed the plain input elsewhere."""
    change = _unchanged(view, experiment, "plain", rows)
    if change is None:
        return Check(name, "skipped", f"the {experiment} experiment raised"), None, ""
    return _within_tolerance(view, name, change, f"{moved} by {change:.3g}", code, f"{leak} by {change:.3g}")


def _permutation(view: JudgeView) -> Outcome:
    name = "permutation-equivariance"
    if view.is_causal()[0]:
        return Check(name, "skipped", "causal attention is not permutation-equivariant"), None, ""
    if "rope" in view.binding.target.kinds:
        return Check(name, "skipped", "rotary attention depends on positions by design"), None, ""
    construct = unmodelled.declared(view.facts.get("declared"))
    if construct:
        return Check(name, "skipped", construct), None, ""
    variant = view.fit.variant if view.fit is not None else None
    if variant is not None and variant.positional:
        return Check(name, "skipped", f"the declared {variant.name} depends on positions by design"), None, ""
    if not (view.ran("permuted") and view.ran("plain")):
        return Check(name, "skipped", "the permuted experiment raised"), None, ""
    permutation = torch.from_numpy(view.plan.keep["permutation"])
    if view.output("plain").shape[1] != len(permutation):  # x-transformers' AttentionPool: learned queries
        return Check(name, "skipped", "the output has another number of positions than the input"), None, ""
    change = max_error(view.output("permuted"), view.output("plain")[:, permutation])
    detail = f"permuting the tokens permutes the output up to {change:.3g}"
    return outcome(
        name, change <= view.tol, detail, codes.QUERY_LEAK,
        f"token positions leak into each other: permuting the input does not permute the output "
        f"(error {change:.3g}, tolerance {view.tol:g})",
    )


def _causal(view: JudgeView) -> Outcome:
    causal, why = view.is_causal()
    if not causal:
        return Check("causal", "skipped", "not a causal target"), None, ""
    baseline = "plain" if view.style == "self" else "self"
    change = _unchanged(view, "future", baseline, (slice(None), slice(0, FUTURE_FROM)))
    if change is None:
        return Check("causal", "skipped", "the future-leak experiment raised"), None, ""
    alignment = view.fit.causal if view.fit else "unknown"
    detail = (
        f"causal because {why}; perturbing tokens >= {FUTURE_FROM} moves earlier outputs "
        f"by {change:.3g}; alignment: {alignment}"
    )
    return _within_tolerance(
        view,
        "causal",
        change,
        detail,
        codes.FUTURE_LEAK,
        f"future tokens leak: changing tokens >= {FUTURE_FROM} moves outputs 0..{FUTURE_FROM - 1} by {change:.3g}",
    )


PROBE = FunctionProbe(
    "leaks", (codes.BATCH_LEAK, codes.QUERY_LEAK, codes.FUTURE_LEAK), 3, every_target, plan, judge
)
