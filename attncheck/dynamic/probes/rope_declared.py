"""The rotary embedding a declaration asks for (``rope``, ``rope_base``: a RoPE assignment under
``attncheck grade``), held against the one the module uses.

The reference fit already reads which rotary embedding explains the module's output (both
conventions, full or partial width, at the declared base: ``judge.Judge.fit``). Rotating
interleaved pairs where the half-split convention is asked for is still attention, and passes
every other check; pretrained weights of the other convention would not load into it, and the
assignment asked for this one. So this probe runs no experiment of its own: it compares the
fit's reading with the declaration.
"""

from __future__ import annotations

from attncheck.dynamic.binding.bind import Binding
from attncheck.dynamic.diagnosis.explain import rope_text
from attncheck.dynamic.probes.base import FunctionProbe, JudgeView, Outcome, Planner
from attncheck.findings import Check

NAME = "rope-declared"
CONVENTION_WORDS = {"half": "the half-split convention (rotate_half)", "interleaved": "interleaved pairs"}


def wanted(binding: Binding) -> bool:
    variant = binding.declared_variant
    return variant is not None and (variant.rope is not None or variant.rope_base is not None)


def plan(planner: Planner) -> None:
    """Nothing to add: the plain run's fit is the evidence."""


def judge(view: JudgeView) -> list[Outcome]:
    declared = view.binding.declared_variant
    if declared is None or not wanted(view.binding):
        return []
    fit = view.fit
    if fit is None or fit.error > view.tol:
        return [(Check(NAME, "skipped", "the module matches no reference, so its rotary embedding cannot be read"),
                 None, "")]
    asked = CONVENTION_WORDS.get(declared.rope or "", "a rotary embedding")
    if fit.rope is None:
        return [(Check(NAME, "failed", f"the module applies no rotary embedding; {asked} is asked for"), None, "")]
    if declared.rope is not None and fit.rope.style != declared.rope:
        detail = f"the module rotates with {rope_text(fit.rope)}; {asked} is asked for"
        return [(Check(NAME, "failed", detail), None, "")]
    base = declared.rope_base
    if base is not None and fit.rope.frequencies is None and fit.rope.base != base:
        detail = f"the module rotates with {rope_text(fit.rope)}; base {base:g} is asked for"
        return [(Check(NAME, "failed", detail), None, "")]
    return [(Check(NAME, "passed", f"{rope_text(fit.rope)}, as asked"), None, "")]


PROBE = FunctionProbe(NAME, (), 21, wanted, plan, judge)
