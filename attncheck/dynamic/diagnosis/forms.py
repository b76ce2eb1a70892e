"""Names the mistake of an attention form (channel attention, talking heads) whose output no correct
reading explains.

The mutants of ``reference.mutants`` are token attention; a form has its own few mistakes
(``reference.forms.Form.mistakes``: a softmax over the wrong axis, a scale left out or taken from the
model width...). Each is tried in every reading of the form the judge fitted, closest first, on the
projections of the fit; the first whose output equals the module's names the mistake.
"""

from __future__ import annotations

from dataclasses import dataclass

from attncheck.dynamic.probes.base import JudgeView
from attncheck.dynamic.reference.tolerance import max_error


@dataclass(frozen=True)
class Named:
    """A form's mistake worded for the report (the fields the reference probe reads)."""

    code: str
    message: str
    detail: str


def diagnose(view: JudgeView) -> Named | None:
    """The form mistake that explains the plain output, None when none does."""
    fit = view.fit
    assert fit is not None and fit.form is not None and fit.assignment is not None
    query, key, value = view.role_inputs("plain")
    output = view.output("plain")
    width = view.binding.dims.width
    readings = [fit.form, *(reading.form for reading in view.form_readings if reading.form is not fit.form)]
    for reading in readings:
        assert reading is not None
        for mistake in reading.mistakes(width):
            error = max_error(output, mistake.form(query, key, value, fit.assignment.projections))
            if error <= view.tol:
                message = (
                    f"{mistake.code} {mistake.name}: behaves exactly like attention that {mistake.what} "
                    f"({reading.text}). Fix: {mistake.fix} (output differs from the reference by {fit.error:.3g}, "
                    f"tolerance {view.tol:g})"
                )
                detail = f"behaves like: {mistake.name} in {reading.text} (within {error:.3g})"
                return Named(mistake.code, message, detail)
    return None
