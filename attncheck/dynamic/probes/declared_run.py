"""One experiment judged against the readings of the variant a module declares, at that experiment's size.

The probes that make a variant visible (``window_length``, ``softcap_engaged``, ``dynamic_rope``)
run a longer or larger input than the plain run. Its reference is rebuilt from what the module
declares, for that input: a window set smaller for the run, a dynamic RoPE base and a T5 table
depend on the length. The weight mapping and rotation are the plain run's fit. The readings are
anchored as the plain fit's are (``variant_fit.candidates``): a probe passes only on a reading
the declaration allows, and a reading with one term changed (the window ignored, off by one)
names the mistake.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attncheck.dynamic.probes.base import Fit, JudgeView
from attncheck.dynamic.reference import mha as reference
from attncheck.dynamic.reference import variant_fit
from attncheck.dynamic.reference.tolerance import max_error
from attncheck.findings import Check

NOT_DECLARED = "NotDeclaredError"  # inside.variant_runs' error when the run could not show the term


@dataclass(frozen=True)
class Reading:
    """One reading of the declaration and how far the experiment's output is from it."""

    name: str
    error: float
    rotation: str = ""  # how its RoPE frequencies were made ("declared base 10000 with dynamic scaling")


def held(view: JudgeView, name: str) -> dict[str, Any]:
    """The scalars the module declares, as the instance that ran ``name`` held them."""
    declared = view.facts.get("declared") or {}
    return view.facts["experiments"].get(name, {}).get("declared") or declared.get("scalars", {})


def term(view: JudgeView, name: str, what: str) -> tuple[str, Any] | None:
    """(attribute, value) of ``variant_fit.TERMS[what]`` as the run held it; None when not declared."""
    return variant_fit.declared_term(held(view, name), what)


def not_run(view: JudgeView, name: str, check: str, length: str) -> Check | None:
    """The skipped check when ``name`` did not run (why, in the child's words); None when it ran."""
    if view.ran(name):
        return None
    error = view.facts["experiments"].get(name, {}).get("error", {})
    if error.get("type") == NOT_DECLARED:
        return Check(check, "skipped", error.get("message", ""))
    raised = f"{error.get('type', 'an error')}: {error.get('message', '')}"
    return Check(check, "skipped", f"the {length} run raised {raised}")


def unjudged(view: JudgeView, name: str, check: str, length: str) -> Check | None:
    """The skipped check when ``name`` cannot be judged: it did not run, or the plain run has no
    matching fit to rebuild its reference from (the plain mismatch is reported there); None otherwise."""
    skipped = not_run(view, name, check, length)
    if skipped is not None:
        return skipped
    fit = view.fit
    if fit is None or fit.assignment is None or fit.error > view.tol:
        return Check(check, "skipped", "the plain output does not match the reference: judged there")
    return None


def readings(
    view: JudgeView, name: str, causal: reference.Causal | None = None, **scalars: Any
) -> list[Reading]:
    """Every reading of the declaration (with ``scalars`` replaced) against ``name``'s output, closest first.

    ``causal`` forces the causal alignment (a window ignored is plain causal attention); by default a
    reading whose mask is causal itself takes none, and the others the plain fit's.
    """
    fit = view.fit
    assert fit is not None
    query, key, _ = view.role_inputs(name)
    facts = dict(view.facts.get("declared") or {})
    facts["scalars"] = {**held(view, name), **scalars}
    dims = view.binding.dims
    declared = variant_fit.Declared(
        facts, view.out, dims.heads, dims.d_model // dims.heads, query.shape[1], key.shape[1]
    )
    rotary = "rope" in view.binding.target.kinds
    output = view.output(name)
    found = []
    for candidate in variant_fit.candidates(declared, view.static_codes, rotary):
        alignment = causal or ("none" if candidate.masks_causal else fit.causal)
        trial = Fit(fit.assignment, alignment, 0.0, candidate.rope or fit.rope, candidate)
        rotation = candidate.rope.scheme if candidate.rope is not None else ""
        found.append(Reading(candidate.variant.name, max_error(output, view.reference(name, None, trial)), rotation))
    return sorted(found, key=lambda reading: reading.error)
