"""The finite-output probe: an unmasked input must give no NaN row.

A query row of the plain run that comes out NaN sees no key at all: a causal mask that hides
the diagonal, or a -inf fill with no guard (ATT303). Judged last, after every other probe.
"""

from __future__ import annotations

import torch

from attncheck.dynamic.probes.base import FunctionProbe, JudgeView, Outcome, every_target, plans_nothing
from attncheck.findings import Check


def judge(view: JudgeView) -> list[Outcome]:
    """finite-output, when the plain run ran."""
    return [nan_rows(view.output("plain"))] if view.ran("plain") else []


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


PROBE = FunctionProbe("finite-output", ("ATT303",), 90, every_target, plans_nothing, judge)
