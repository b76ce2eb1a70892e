"""Which static findings the dynamic check could have seen on its inputs, and did not.

A target that matches the reference only proves what its inputs could show. A module with no
Q/K/V projection matches a reference built the same way; a discarded attention-dropout call is
invisible when another dropout makes two train-mode calls differ; a mask used against the
module's own docstring matches whichever convention the harness tried. The merge
(``attncheck.merge``) downgrades a static finding only when this module says the check was
able to see that mistake: a mutant of it (``mutants.MUTANTS``) differs from the reference
beyond tolerance on an experiment where the module matched the reference, or the probe that
tests that very claim ran and held. Every other static finding keeps its severity.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import Any

import torch

from attncheck.dynamic.diagnosis import explain
from attncheck.dynamic.diagnosis.diagnose import comparable_rows
from attncheck.dynamic.probes.base import JudgeView
from attncheck.dynamic.probes.masks import CONVENTIONS, SHAPES, choose_combo, stated_convention
from attncheck.dynamic.reference.mutants import REFERENCE, Case, Setting, Stages

MARGIN = 10.0  # a mutant must differ by this many tolerances (and at least FLOOR) to count as visible
FLOOR = 1e-4


def refuted(judge: JudgeView, checks: Collection[Any]) -> dict[str, str]:
    """Static codes of the judge's target that its experiments could see and did not see, each with
    how it could see it. ``checks`` are the target's finished checks (``findings.Check``)."""
    wanted = set(judge.static_codes)
    if not wanted:
        return {}
    passed = {check.name: check.detail for check in checks if check.status == "passed"}
    found: dict[str, str] = {}
    for code, probe in PROBES.items():
        if code in wanted:
            how = probe(judge, passed)
            if how:
                found[code] = how
    mutant_codes = wanted - set(PROBES)
    if mutant_codes:
        found.update(_by_mutants(judge, mutant_codes))
    return found


def _fully_masked(judge: JudgeView, passed: dict[str, str]) -> str | None:
    detail = passed.get("fully-masked-rows")
    return f"the fully masked probe ran and held: {detail}" if detail else None


def _documented_polarity(judge: JudgeView, passed: dict[str, str]) -> str | None:
    """ATT304 is about the documented convention: only a mask probe run in that convention sees it."""
    detail = passed.get("mask-convention", "")
    if "documented as" not in detail:
        return None
    return f"the mask probes ran in the documented convention and held ({detail})"


def _attention_dropout(judge: JudgeView, passed: dict[str, str]) -> str | None:
    """Two train-mode calls differ: that proves the attention dropout works only when it is the
    module's one dropout (another, on the output say, would make them differ as well)."""
    detail = passed.get("dropout-active")
    modules = judge.facts.get("dropout", {}).get("modules", 0)
    return f"the module's only dropout takes effect ({detail})" if detail and modules == 1 else None


PROBES: dict[str, Callable[[Any, dict[str, str]], str | None]] = {
    "ATT103": _attention_dropout,
    "ATT303": _fully_masked,
    "ATT304": _documented_polarity,
}
"""Codes whose evidence is a probe rather than a mutant."""


def _by_mutants(judge: JudgeView, codes: set[str]) -> dict[str, str]:
    """Codes every one of whose mutants the module's matching outputs rule out.

    Every one, because a code names a family (ATT101: no Q, no K or no V projection) and the
    static finding is about one member: a module without a V projection still rules out "no Q
    projection". A mutant counts as ruled out when, on some experiment where the module matched
    the reference, it would have moved the output beyond tolerance (with a margin).
    """
    mutants = [m for m in explain.mutants_for(judge.style) if m.code in codes]
    gaps: dict[str, float] = {}  # mutant name -> the largest move it would make on a matching experiment
    where: dict[str, str] = {}
    built: set[str] = set()  # mutants that could be built for some matching experiment
    for label, case, _output, setting in _matching(judge):
        stages = Stages(case, setting)
        reference_output = stages.output(REFERENCE)
        rows = comparable_rows(case, setting.num_heads)
        for mutant, mutated in zip(mutants, stages.outputs([m.knobs for m in mutants]), strict=True):
            if mutated is None:
                continue
            built.add(mutant.name)
            if mutated.shape == reference_output.shape:
                gap = _gap(mutated, reference_output, rows)
                if gap > gaps.get(mutant.name, -1.0):
                    gaps[mutant.name], where[mutant.name] = gap, label
    visible = max(MARGIN * judge.tol, FLOOR)
    found: dict[str, str] = {}
    for code in sorted(codes):
        # a mistake in a variant's position bias is no form of the mistake where the module declares none
        family = [m for m in mutants if m.code == code and (m.name in built or not m.knobs.misplaces_bias)]
        if not family or any(gaps.get(m.name, 0.0) <= visible for m in family):
            continue
        closest = min(family, key=lambda m: gaps[m.name])
        found[code] = (
            f"each form of this mistake ({len(family)}) would move the output by at least {gaps[closest.name]:.3g} "
            f"({closest.name} on the {where[closest.name]} experiment); the module matched the reference "
            f"within {judge.tol:g}"
        )
    return found


def _matching(judge: JudgeView) -> Iterator[tuple[str, Case, torch.Tensor, Setting]]:
    """The experiments whose output matches the reference, as diagnosis cases: the plain one (and
    self-attention for a cross target), and the masked one in the convention that matched."""
    if judge.fit is None:  # the output shape was wrong: no experiment was compared with the reference
        return
    causal = explain.intended_causal(judge)
    observations = [(name, None, None) for name in ("plain", "self") if judge.ran(name)]
    combo = _matched_combo(judge)
    if combo is not None:
        observations.append((f"masked ({combo})", f"mask/{combo}", explain.planned_keep(judge, combo)))
    settings = explain.settings_for_judge(judge)
    for label, name, keep in observations:
        case, output = explain.observation(judge, name or label, causal, keep)
        for setting in settings:
            expected = Stages(case, setting).output(REFERENCE)
            rows = comparable_rows(case, setting.num_heads)
            if expected.shape == output.shape and _gap(output, expected, rows) <= judge.tol:
                yield label, case, output, setting
                break


def _matched_combo(judge: JudgeView) -> str | None:
    """The mask shape/convention the module matched the reference in, the documented one first."""
    mask = judge.binding.forward.mask_name if judge.binding.forward else None
    if not mask or judge.fit is None:
        return None
    ran = [f"{s}/{c}" for s in SHAPES for c in CONVENTIONS if judge.ran(f"mask/{s}/{c}")]
    matches = [c for c in ran if judge.masked_error(c) <= judge.tol]
    if not matches:
        return None
    return choose_combo(matches, stated_convention(judge), ran)


def _gap(output: torch.Tensor, reference_output: torch.Tensor, rows: torch.Tensor) -> float:
    """max |output - reference| over the compared rows; a non-finite value where the other is finite is inf."""
    diff = (output.double() - reference_output.double()).abs()
    both_nan = output.isnan() & reference_output.isnan()
    diff = torch.where(both_nan, torch.zeros_like(diff), diff.nan_to_num(nan=float("inf")))
    if rows.shape == diff.shape[:2]:
        diff = diff[rows]
    return float(diff.max()) if diff.numel() else 0.0
