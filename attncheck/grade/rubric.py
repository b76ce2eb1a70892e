"""The rubric: which checks make up each graded group, and how a checker's verdicts become points.

A group (shape, reference, mask, ...) earns its points in proportion to its checks that
passed among those that ran (partial credit), or all or nothing when partial credit is off.
A group none of whose checks ran (a module without a mask has no mask to grade) is "not
applicable" and keeps its points, unless the assignment requires it: then it earns 0, since
the student did not build what was asked. Static findings cost points from their own pool,
per code; the default costs come from the catalogue's severities, and the two codes a correct
module may fairly keep (ATT302 a fill value that overflows float16, ATT303 no guard for a
fully masked row) cost nothing by default.

A dynamic check that is the evidence of one code (``ADVICE_CHECKS``: ``fully-masked-rows`` is
ATT303 seen at run time) follows that code's cost: while the code is advice, the check's
failure is advice too and leaves its group's points alone. A fully masked row (a query whose
keys are all padding) is an input most assignments exclude: a ``-inf`` fill is the textbook
answer and is exact on every row that sees a key. An assignment that wants the guard charges
ATT303 (``[rubric.static] ATT303 = 2``), and the check then counts in the mask group as well.
A submission whose code could not be read, or
whose target could not be run (an import error, a hang, no way to call it, no torch to run it)
earns 0 for every dynamic group; so does one whose forward pass raises (nothing past the first
call can be checked).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from attncheck.catalogue import CODES
from attncheck.findings import Finding, Severity, TargetResult

# Check names (``attncheck.dynamic`` verdicts) by graded group; a prefix ends with "-".
GROUPS: dict[str, tuple[str, ...]] = {
    "shape": ("forward", "output-shape", "finite-output"),
    "reference": ("reference", "projections", "softmax-axis", "weights-sum"),
    "mask": ("reference-masked", "mask-convention", "masked-keys", "fully-masked-rows"),
    "causal": ("causal",),
    "independence": ("batch-independence", "query-independence", "permutation-equivariance"),
    "gradients": ("gradients",),
    "dropout": ("eval-deterministic", "dropout-active"),
    "low_precision": ("low-precision-",),
    "variant": ("gqa-grouping", "rope-"),
}
DEFAULT_POINTS: dict[str, float] = {
    "shape": 10, "reference": 30, "mask": 15, "causal": 10, "independence": 10,
    "gradients": 5, "dropout": 5, "low_precision": 5, "variant": 0,
}
STATIC = "static"
ADVICE = "advice"  # the status of a check or finding reported but not graded
DEFAULT_STATIC_POINTS = 10.0
FREE_CODES = ("ATT302", "ATT303")  # a correct module may fairly keep these: advice, not a deduction
SEVERITY_COST = {Severity.ERROR: 2.0, Severity.WARNING: 1.0}
ADVICE_CHECKS = {"fully-masked-rows": "ATT303"}  # a check -> the code it is the run-time evidence of


@dataclass(frozen=True)
class Rubric:
    """Points per group, the static pool and its per-code costs, and how credit is given."""

    points: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_POINTS))
    static_points: float = DEFAULT_STATIC_POINTS
    costs: Mapping[str, float] = field(default_factory=dict)  # code -> points per finding
    required: tuple[str, ...] = ()
    partial: bool = True

    @property
    def maximum(self) -> float:
        return sum(self.points.values()) + self.static_points

    def cost(self, code: str) -> float:
        if code in self.costs:
            return float(self.costs[code])
        if code in FREE_CODES or code not in CODES:
            return 0.0
        return SEVERITY_COST.get(CODES[code].severity, 0.0)

    def is_advice(self, code: str) -> bool:
        """One of the codes a correct module may keep, and this rubric does not charge it: reported, as
        a static finding or a run-time check, without costing anything."""
        return code in FREE_CODES and self.cost(code) == 0

    def counts(self, check: str) -> bool:
        """Whether a check's verdict earns or loses points: not one whose code is advice."""
        code = ADVICE_CHECKS.get(check)
        return code is None or not self.is_advice(code)

    @property
    def columns(self) -> list[str]:
        """The gradebook's per-check columns, in a fixed order."""
        return [*self.points, STATIC]


@dataclass(frozen=True)
class GroupScore:
    """What one group earned, and the checks behind it (name, status, detail)."""

    group: str
    score: float
    maximum: float
    status: str  # "passed", "partial", "failed", "n/a", "not run"
    checks: tuple[tuple[str, str, str], ...] = ()


def group_of(check: str) -> str | None:
    for group, names in GROUPS.items():
        if any(check == name or (name.endswith("-") and check.startswith(name)) for name in names):
            return group
    return None


def score_groups(rubric: Rubric, result: TargetResult | None) -> list[GroupScore]:
    """Every group's score from one target's checks; None (nothing ran) earns 0 everywhere."""
    scores = []
    crashed = result is not None and any(c.name == "forward" and c.status == "failed" for c in result.checks)
    for group, points in rubric.points.items():
        if result is None or result.status in ("error", "skipped") or (crashed and group != "shape"):
            scores.append(GroupScore(group, 0.0, points, "not run"))
            continue
        checks = tuple((c.name, c.status if rubric.counts(c.name) else ADVICE, c.detail)
                       for c in result.checks if group_of(c.name) == group)
        scores.append(_group_score(rubric, group, points, checks))
    return scores


def _group_score(rubric: Rubric, group: str, points: float, checks: tuple[tuple[str, str, str], ...]) -> GroupScore:
    ran = [status for _, status, _ in checks if status in ("passed", "failed")]
    if not ran:
        required = group in rubric.required
        return GroupScore(group, 0.0 if required else points, points, "failed" if required else "n/a", checks)
    passed = ran.count("passed")
    if passed == len(ran):
        return GroupScore(group, points, points, "passed", checks)
    earned = points * passed / len(ran) if rubric.partial else 0.0
    return GroupScore(group, round(earned, 2), points, "partial" if earned else "failed", checks)


def score_static(rubric: Rubric, findings: Iterable[Finding]) -> GroupScore:
    """The static pool less the cost of each static finding (never below 0)."""
    costs = [(f, rubric.cost(f.code)) for f in findings if f.source in ("static", "both")]
    lost = sum(cost for _, cost in costs)
    earned = max(0.0, rubric.static_points - lost)
    checks = tuple((f.code, "failed" if cost else ADVICE, f.message) for f, cost in costs)
    status = "passed" if not lost else ("partial" if earned else "failed")
    return GroupScore(STATIC, round(earned, 2), rubric.static_points, status, checks)
