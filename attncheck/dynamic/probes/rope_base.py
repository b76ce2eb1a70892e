"""The RoPE base a module declares (``rope_theta``, ``base``...) held against the rotation it applies.

The reference fit reads the rotation at the declared base and, beside it, at the default one
(``explain.rope_candidates``). A module that stores ``rope_theta = 500000`` and builds its frequencies
from a hard-coded 10000 passes every other check: it is attention, rotated consistently. A checkpoint
trained at its declared base would not load into it, so the fit's own base, where it is not the one
declared, is ATT402's wrong ``inv_freq``. This probe runs no experiment: the plain run's fit is the
evidence, as in ``rope_declared`` (the base an assignment asks for).
"""

from __future__ import annotations

import math

from attncheck.dynamic.binding.bind import Binding
from attncheck.dynamic.diagnosis.explain import rope_text
from attncheck.dynamic.probes.base import FunctionProbe, JudgeView, Outcome, plans_nothing
from attncheck.dynamic.reference.variant_fit import BASE_NAMES, BUFFER_SCHEME, first_positive, spelled
from attncheck.findings import Check

NAME = "rope-base"


def wanted(binding: Binding) -> bool:
    return binding.target.is_class


def judge(view: JudgeView) -> list[Outcome]:
    fit = view.fit
    if fit is None or fit.rope is None or fit.error > view.tol:
        return []  # no rotation read
    scalars = (view.facts.get("declared") or {}).get("scalars", {})
    if scalars.get("rope_scaling") or scalars.get("rope_parameters"):
        return []  # a scaled rotation: its base is read with the scaling, where the declared fit already tried it
    declared = first_positive(scalars, BASE_NAMES)
    if declared is None:
        return []
    name, base = spelled(scalars, declared[0]), float(declared[1])
    if fit.rope.frequencies is None:  # a rotation read at a base of the fit's own
        if math.isclose(base, fit.rope.base, rel_tol=1e-9):
            return []
        built = f"the frequencies are built from base {fit.rope.base:g}"
    elif fit.rope.scheme.startswith(BUFFER_SCHEME):  # the module's inv_freq buffer, which the rotation used
        if _from_base(fit.rope.frequencies, base):
            return []
        built = "the module's inv_freq buffer is not built from it"
    else:
        return []  # frequencies computed from the declaration itself
    detail = f"the module declares {name} = {base:g} and rotates with {rope_text(fit.rope)}"
    message = (
        f"the declared {name} = {base:g} never reaches the rotation: {built}, so a checkpoint trained at "
        f"{base:g} does not fit. Fix: inv_freq = 1.0 / ({name} ** (torch.arange(0, rotary_dim, 2) / rotary_dim))"
    )
    return [(Check(NAME, "failed", detail), "ATT402", message)]


def _from_base(frequencies: tuple[float, ...], base: float) -> bool:
    """Whether ``frequencies`` are RoPE's standard ones at ``base`` for their width (two angles a pair)."""
    width = 2 * len(frequencies)
    return all(math.isclose(f, base ** (-2 * i / width), rel_tol=1e-4) for i, f in enumerate(frequencies))


PROBE = FunctionProbe(NAME, ("ATT402",), 22, wanted, plans_nothing, judge)
