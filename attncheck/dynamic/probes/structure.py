"""The structure probe: checks read from what the module did rather than from what it returned.

The child records which projections ran (``weights``) and every softmax with its
input shape and axis; the gradients say which parameters reach the output.
From these, mistakes that the reference comparison cannot name on its own:
projections defined but never applied (ATT101, ATT102: the output equals the
reference *without* them, so it "matches"), and a softmax over the wrong axis
spelled in a way no single mutant reproduces (ATT202). Judged for a class whose output a
reference configuration was fitted to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from attncheck.dynamic.binding.bind import Binding
from attncheck.dynamic.binding.weights import Assignment
from attncheck.dynamic.probes.base import FunctionProbe, JudgeView, Outcome, plans_nothing
from attncheck.findings import Check


def unused(grads: Mapping[str, float | None] | None) -> list[str]:
    """Parameters that got no gradient from the output."""
    return [name for name, norm in (grads or {}).items() if norm is None]


def projections(
    assignment: Assignment | None, error: float, tol: float, grads: Mapping[str, float | None] | None
) -> list[Outcome]:
    """ATT101/ATT102 when the output equals attention without projections the module defines.

    A module with no parameters for a projection (``nn.Identity`` with one head) is
    legitimate; one whose parameters exist but never reach the output is not.
    """
    name = "projections"
    idle = unused(grads)
    if assignment is None or error > tol:
        return [(Check(name, "skipped", "the output does not match any reference"), None, "")]
    proj = assignment.projections
    missing_qkv = [p.upper() for p in ("q", "k", "v") if getattr(proj, p) is None]
    if not idle or not (missing_qkv or proj.o is None):
        return [(Check(name, "passed", assignment.description), None, "")]
    idle_text = ", ".join(idle[:4]) + (" ..." if len(idle) > 4 else "")
    within = f" (within {error:.3g}, tolerance {tol:g})"
    found: list[Outcome] = []
    if missing_qkv:
        which = "/".join(missing_qkv)
        found.append(
            (
                Check(name, "failed", f"output equals attention with no {which} projection; unused: {idle_text}"),
                "ATT101",
                f"the output equals attention over the raw inputs{within}: no {which} projection is applied, and "
                f"{idle_text} get no gradient. Without learned projections every head compares the same raw "
                "features. Fix: q = W_q(query), k = W_k(key), v = W_v(value), then split into heads.",
            )
        )
    if proj.o is None:
        found.append(
            (
                Check(name, "failed", f"output equals the merged heads with no output projection; unused: {idle_text}"),
                "ATT102",
                f"the output equals the merged heads with no output projection{within}, and {idle_text} get no "
                "gradient. The heads are never mixed. Fix: return W_o(merged) after merging the heads.",
            )
        )
    return found


def softmax_axis(calls: Sequence[Mapping[str, Any]] | None, q_len: int, k_len: int) -> Outcome:
    """ATT202 when a softmax over a (..., q, k) score tensor is not taken over the last (key) axis."""
    name = "softmax-axis"
    scores = [c for c in calls or [] if len(c["shape"]) >= 3 and tuple(c["shape"][-2:]) == (q_len, k_len)]
    if not scores:
        return Check(name, "skipped", "no softmax over a (query, key) score tensor was seen"), None, ""
    wrong = [c for c in scores if c["dim"] != len(c["shape"]) - 1]
    if not wrong:
        return Check(name, "passed", f"{len(scores)} softmax call(s) over the key axis"), None, ""
    first = wrong[0]
    shape = tuple(first["shape"])
    axis = {len(shape) - 2: "the query axis", 1: "the heads axis"}.get(first["dim"], f"axis {first['dim']}")
    return (
        Check(name, "failed", f"softmax over dim={first['dim']} of a {shape} score tensor"),
        "ATT202",
        f"a softmax is taken over dim={first['dim']} ({axis}) of the {shape} scores instead of the keys "
        f"({len(wrong)} of {len(scores)} softmax calls). Each query's weights over the keys must sum to 1. "
        "Fix: torch.softmax(scores, dim=-1).",
    )


def wanted(binding: Binding) -> bool:
    """A class: it has projections to find and records its softmax calls."""
    return binding.target.is_class


def judge(view: JudgeView) -> list[Outcome]:
    """projections and softmax-axis, for a class with a fitted reference configuration."""
    if not wanted(view.binding) or view.fit is None:
        return []
    query, key, _ = view.role_inputs("plain")
    found = projections(view.fit.assignment, view.fit.error, view.tol, view.facts.get("grads"))
    found.append(softmax_axis(view.facts.get("softmax"), query.shape[1], key.shape[1]))
    return found


PROBE = FunctionProbe("structure", ("ATT101", "ATT102", "ATT202"), 7, wanted, plans_nothing, judge)
