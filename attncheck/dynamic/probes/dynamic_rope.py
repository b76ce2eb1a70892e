"""The dynamic-RoPE probe: declared dynamic NTK scaling, judged on positions past max_position_embeddings.

Dynamic NTK (``rope_scaling = {"rope_type": "dynamic", "factor": f}``) leaves the frequencies
alone up to ``max_position_embeddings`` and grows the base only for longer sequences, so a module
that never applies it is exact on the plain run's 7 tokens. Where the module declares it, the
child runs 24 tokens (the harness builds configs with ``max_position_embeddings`` 16), and the
output is judged against the declaration's readings at that length, whose base has grown
(``reference.rope_scaling``). An output that equals the base never grown is ATT402 (rotated with
the wrong frequencies past the maximum).
"""

from __future__ import annotations

from attncheck.dynamic import codes
from attncheck.dynamic.binding.bind import Binding
from attncheck.dynamic.probes import declared_run
from attncheck.dynamic.probes.base import FunctionProbe, JudgeView, Outcome, Planner, as_list
from attncheck.findings import Check

NAME = "dynamic-rope"
EXPERIMENT = "dynamic-rope/long"
LENGTH = 24


def wanted(binding: Binding) -> bool:
    """A rotary self-attention class: the child runs the long input only where it declares dynamic scaling."""
    rotary = binding.target.is_class and "rope" in binding.target.kinds
    return rotary and binding.forward is not None and binding.style == "self"


def plan(planner: Planner) -> None:
    """One run of ``LENGTH`` fresh tokens, marked for declared dynamic NTK scaling."""
    x = planner.tensor("dynamic-rope/x", planner.random(LENGTH))
    planner.add(EXPERIMENT, {role: x for role in planner.plain}, variant="dynamic-rope")


def verdict(view: JudgeView) -> Outcome | None:
    """The dynamic-rope check, or None where no dynamic scaling is declared."""
    declared = declared_run.term(view, EXPERIMENT, "dynamic-rope") if EXPERIMENT in view.experiments else None
    if declared is None:
        return None
    limit = declared[1]
    skipped = declared_run.unjudged(view, EXPERIMENT, NAME, f"{LENGTH}-token")
    if skipped is not None:
        return skipped, None, ""
    best = declared_run.readings(view, EXPERIMENT)
    if not best:
        return Check(NAME, "skipped", "the declared rotation cannot be rebuilt for the long run"), None, ""
    detail = (
        f"positions 0..{LENGTH - 1}, past max_position_embeddings = {limit}: closest reading "
        f"{best[0].rotation or best[0].name}, "
        f"max error {best[0].error:.3g} (tolerance {view.tol:g})"
    )
    if best[0].error <= view.tol:
        return Check(NAME, "passed", detail), None, ""
    static = declared_run.readings(view, EXPERIMENT, rope_scaling=None, rope_parameters=None)
    check = Check(NAME, "failed", detail)
    if static and static[0].error <= view.tol:
        return check, "ATT402", (
            f"dynamic NTK scaling is declared but never applied: on {LENGTH} tokens, past "
            f"max_position_embeddings = {limit}, the output is RoPE at the unscaled base (error "
            f"{static[0].error:.3g}), {best[0].error:.3g} from the grown base (tolerance {view.tol:g}). Fix: for "
            "seq_len > max_position_embeddings use base * (factor * seq_len / max_position_embeddings - "
            "(factor - 1)) ** (dim / (dim - 2))"
        )
    return check, codes.REFERENCE_MISMATCH, (
        f"on {LENGTH} tokens, past max_position_embeddings = {limit}, the output matches no reading of the "
        f"declared dynamic RoPE scaling (error {best[0].error:.3g}, tolerance {view.tol:g})"
    )


PROBE = FunctionProbe(
    NAME, ("ATT402", codes.REFERENCE_MISMATCH), 70, wanted, plan, lambda view: as_list(verdict(view))
)
