"""The weights probe: do the attention weights the module returns sum to 1 over the keys?

Read from the plain run's returned weights (when the module returns them): rows that sum to 1
pass; columns that sum to 1 instead are a softmax over the query axis (ATT202); anything else is
ATT903 (a mismatch the reference probe explains, or not).
"""

from __future__ import annotations

from attncheck.dynamic import codes
from attncheck.dynamic.probes.base import FunctionProbe, JudgeView, Outcome, every_target, plans_nothing
from attncheck.findings import Check


def judge(view: JudgeView) -> list[Outcome]:
    """weights-sum."""
    weights = view.out.get("plain/weights")
    if weights is None:
        return [(Check("weights-sum", "skipped", "no attention weights returned"), None, "")]
    if view.fit is not None and view.fit.variant is not None and view.fit.variant.sinks is not None:
        return [(Check("weights-sum", "skipped", "attention sinks take a share of each row by design"), None, "")]
    rows, columns = weights.sum(-1), weights.sum(-2)
    error = float((rows - 1).abs().max())
    detail = f"weight rows sum to {float(rows.min()):.4g}..{float(rows.max()):.4g}"
    if error <= view.tol:
        return [(Check("weights-sum", "passed", detail), None, "")]
    if float((columns - 1).abs().max()) <= view.tol:
        return [(
            Check("weights-sum", "failed", detail + "; columns sum to 1"),
            "ATT202",
            "softmax is taken over the query axis: attention weight columns sum to 1, rows to "
            f"{float(rows.min()):.3g}..{float(rows.max()):.3g}",
        )]
    return [(
        Check("weights-sum", "failed", detail),
        codes.REFERENCE_MISMATCH,
        f"attention weight rows do not sum to 1 ({float(rows.min()):.3g}..{float(rows.max()):.3g})",
    )]


PROBE = FunctionProbe("weights-sum", ("ATT202", codes.REFERENCE_MISMATCH), 4, every_target, plans_nothing, judge)
