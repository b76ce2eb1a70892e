"""Checks read from what the module did rather than from what it returned.

The child records which projections ran (``weights``) and every softmax with its
input shape and axis; the gradients say which parameters reach the output.
From these, mistakes that the reference comparison cannot name on its own:
projections defined but never applied (ATT101, ATT102: the output equals the
reference *without* them, so it "matches"), and a softmax over the wrong axis
spelled in a way no single mutant reproduces (ATT202).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from attncheck.dynamic.binding.weights import Assignment
from attncheck.dynamic.probes.base import Outcome
from attncheck.findings import Check

"""A check, the catalogue code when it failed, and the finding's message."""

MISTAKE_PREFIXES = ("ATT1", "ATT2", "ATT3", "ATT4")


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


def nan_rows(output: torch.Tensor) -> Outcome:
    """ATT303 when an unmasked input gives NaN rows: some query sees no key (a causal mask hiding the
    diagonal, or a -inf fill with no guard)."""
    name = "finite-output"
    bad = output.isnan().flatten(2).any(dim=-1)  # (b, q)
    if not bool(bad.any()):
        return Check(name, "passed", "the unmasked output is finite"), None, ""
    rows = sorted({int(q) for q in bad.nonzero()[:, 1]})
    return (
        Check(name, "failed", f"query rows {rows} are NaN without any padding mask"),
        "ATT303",
        f"query rows {rows} come out NaN with no padding mask: those queries see no key and the softmax "
        "of an all -inf row is NaN. A query must always see at least itself. Fix: keep the diagonal in "
        "the causal mask (block with triu(diagonal=1)), or guard fully masked rows.",
    )


def unexplained_message(message: str, properties: Sequence[Check]) -> str:
    """The ATT903 message with the properties that held and failed, since no mutant matched."""
    held = [c.name for c in properties if c.status == "passed"]
    failed = [c.name for c in properties if c.status == "failed"]
    parts = [message, "no known mistake (alone or in pairs) explains it"]
    if held:
        parts.append(f"held: {', '.join(held)}")
    if failed:
        parts.append(f"failed: {', '.join(failed)}")
    return "; ".join(parts)
