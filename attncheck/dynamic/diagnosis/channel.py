"""Names the mistake of a channel attention (DaViT, XCiT) whose output no correct reading explains.

The mutants of ``reference.mutants`` are token attention; a channel attention has its own few
mistakes (``reference.channel.mistakes``): the softmax over the wrong channel axis, the scores
unscaled or scaled by the model width. Each is tried in every reading the module admits, on the
projections of the fit, and the first whose output equals the module's names the mistake.
"""

from __future__ import annotations

from dataclasses import dataclass

from attncheck.dynamic.probes.base import JudgeView
from attncheck.dynamic.reference import channel
from attncheck.dynamic.reference.tolerance import max_error


@dataclass(frozen=True)
class Named:
    """A channel attention's mistake worded for the report (the fields the reference probe reads)."""

    code: str
    message: str
    detail: str


def diagnose(view: JudgeView) -> Named | None:
    """The channel mistake that explains the plain output, None when none does."""
    fit = view.fit
    assert fit is not None and fit.channel is not None and fit.assignment is not None
    query, key, value = view.role_inputs("plain")
    output = view.output("plain")
    width, heads = view.binding.dims.width, fit.channel.heads
    readings = [fit.channel, *channel.forms(view.facts.get("declared"), view.out, heads, width, query.shape[1])]
    for reading in readings:
        for mistake in channel.mistakes(reading, width):
            error = max_error(output, mistake.form(query, key, value, fit.assignment.projections))
            if error <= view.tol:
                message = (
                    f"{mistake.code} {mistake.name}: behaves exactly like channel attention that {mistake.what} "
                    f"({reading.text}). Fix: {mistake.fix} (output differs from the reference by {fit.error:.3g}, "
                    f"tolerance {view.tol:g})"
                )
                detail = f"behaves like: {mistake.name} in {reading.text} (within {error:.3g})"
                return Named(mistake.code, message, detail)
    return None
