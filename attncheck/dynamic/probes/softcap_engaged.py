"""The soft-cap probe: a declared tanh soft-cap, judged on scores large enough to engage it.

c·tanh(s / c) is the identity on small scores: the plain run's scores are about 1, so a cap of 50
that is missing, or applied after the softmax, still passes on tolerance. Where the module
declares a cap (``softcap``, ``attn_logit_softcapping``, ``logit_softcap``), the child runs the
plain input scaled by 3, 9 and 27 (scores grow by the square), and each output is judged against
the declaration's readings with and without the cap (``declared_run``). The check needs one
run where the two differ; a run that matches the uncapped reading is ATT201 (the scores reach the
softmax without the declared cap), one far closer to it than to the capped one is ATT203 (the cap
acts after the softmax, or on another tensor).
"""

from __future__ import annotations

from attncheck.dynamic import codes
from attncheck.dynamic.binding.bind import Binding
from attncheck.dynamic.probes import declared_run, precision
from attncheck.dynamic.probes.base import FunctionProbe, JudgeView, Outcome, Planner, as_list
from attncheck.dynamic.reference.variant_fit import CAP_NAMES, spelled
from attncheck.findings import Check

NAME = "softcap-engaged"
FACTORS = (3, 9, 27)
VISIBLE = 100  # the capped and uncapped readings must differ by this many tolerances on some run
AFTER_SOFTMAX = 4  # an output this many times closer to the uncapped reading: the cap acts elsewhere


def wanted(binding: Binding) -> bool:
    """A self-attention class: the child runs the scaled inputs only where it declares a soft-cap."""
    return binding.target.is_class and binding.forward is not None and binding.style == "self"


def plan(planner: Planner) -> None:
    """The plain input scaled by each factor, marked for a declared soft-cap."""
    for factor in FACTORS:
        x = planner.tensor(f"softcap/x{factor}", planner.base * factor)
        planner.add(f"softcap/x{factor}", {role: x for role in planner.plain}, variant="softcap")


def verdict(view: JudgeView) -> Outcome | None:
    """The softcap-engaged check, or None where no soft-cap is declared."""
    names = {f"softcap/x{factor}": factor for factor in FACTORS}
    first = next(iter(names))
    declared = declared_run.term(view, first, "softcap") if first in view.experiments else None
    if declared is None:
        return None
    key, cap = declared
    name = spelled(declared_run.held(view, first), key)  # the module's own name for it
    for run in names:
        skipped = declared_run.not_run(view, run, NAME, f"scaled-input ({run})")
        if skipped is not None:
            return skipped, None, ""
    fit = view.fit
    if fit is None or fit.assignment is None:
        return Check(NAME, "skipped", "no weight mapping of the plain run to judge the scaled runs with"), None, ""
    uncapped = dict.fromkeys(CAP_NAMES)
    errors = {
        run: (declared_run.readings(view, run)[0].error, declared_run.readings(view, run, **uncapped)[0].error)
        for run in names
    }
    pairs = [f"x{names[run]}: {capped:.3g} capped / {bare:.3g} uncapped" for run, (capped, bare) in errors.items()]
    numbers = ", ".join(pairs)
    tolerances = {run: precision.scaled_tolerance(view.output(run)) for run in names}  # float32 on outputs x27
    tolerance = ", ".join(f"{tolerances[run]:.2g}" for run in names)
    detail = f"{name} = {cap:g}; errors of the inputs scaled {numbers} (tolerances {tolerance})"
    if all(max(errors[run]) <= VISIBLE * tolerances[run] for run in names):
        return Check(NAME, "skipped", f"{detail}: the scores never reach the cap"), None, ""
    worst = max(names, key=lambda run: errors[run][0] / tolerances[run])
    capped_error, uncapped_error = errors[worst]
    tol = tolerances[worst]
    if capped_error <= tol:
        return Check(NAME, "passed", detail), None, ""
    factor = names[worst]
    check = Check(NAME, "failed", detail)
    if uncapped_error <= tol:
        return check, "ATT201", (
            f"the declared soft-cap {name} = {cap:g} is not applied: with the input scaled by {factor} the output "
            f"is attention without it (error {uncapped_error:.3g}), {capped_error:.3g} from the capped reference "
            f"(tolerance {tol:.2g}). Fix: scores = {name} * tanh(scores / {name}) after the scale, before the "
            "mask and the softmax"
        )
    if uncapped_error * AFTER_SOFTMAX < capped_error:
        return check, "ATT203", (
            f"the declared soft-cap {name} = {cap:g} does not act on the scores before the softmax: with the input "
            f"scaled by {factor} the output is {uncapped_error:.3g} from attention without a cap and "
            f"{capped_error:.3g} from the capped reference (tolerance {tol:.2g}), as when it is applied to the "
            f"weights after the softmax or to another tensor. Fix: scores = {name} * tanh(scores / {name}) "
            "before the softmax"
        )
    if fit.error > view.tol:
        return Check(NAME, "skipped", f"{detail}; the plain output does not match the reference either"), None, ""
    return check, codes.REFERENCE_MISMATCH, (
        f"with the input scaled by {factor} (scores past the declared soft-cap {name} = {cap:g}) the output "
        f"matches no reading of the declaration (error {capped_error:.3g}, tolerance {tol:.2g})"
    )


PROBE = FunctionProbe(
    NAME, ("ATT201", "ATT203", codes.REFERENCE_MISMATCH), 60, wanted, plan, lambda view: as_list(verdict(view))
)
