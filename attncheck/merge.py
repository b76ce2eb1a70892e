"""Join the static and dynamic findings into what the user reads.

A mistake seen both ways is reported once, at the static location, with both kinds of evidence
(source ``both``). A static finding is downgraded to info only by evidence: the dynamic check ran
the target, was able to see that very mistake on the inputs it used (``TargetResult.refuted``:
a mutant of it differs from the reference there, or the probe of that claim ran and held), and
did not see it. A passing check proves only what it could see, so every other static finding
keeps its severity and says that the dynamic check could not confirm or refute it. In an isolated
run (CI, grading: ``keep_static_errors``) a static error is never downgraded: code that detects
the checker can pass the dynamic check while its normal path is wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from attncheck.findings import Finding, Severity, TargetResult

REFUTED_REASON = "the dynamic check could see this mistake on its inputs and did not"
DESIGN_CONFIRMED = "the reference ran the design this finding declares and the module matched it"
UNSEEN_NOTE = (
    "dynamic: the check ran this target but could not confirm or refute this finding "
    "(no experiment it ran could show this mistake)"
)

REFERENCE_DESIGNS = frozenset({"ATT201", "ATT402"})
"""By-design verdicts whose design the reference runs (a unit scale, a declared rotation): a passing run
confirms them. ATT103's dropout skipped on one branch is by design only in that a run on that branch
cannot raise it; a passing run, which took the other branch, confirms nothing."""

Key = tuple[str, str, "str | None"]


def _key(finding: Finding) -> Key:
    return (finding.code, finding.path, finding.target)


def merge(static: Sequence[Finding], dynamic: Iterable[Finding],
          targets: Sequence[TargetResult], keep_static_errors: bool = False) -> list[Finding]:
    """One finding per (code, path, target) seen both ways; see the module doc."""
    merged = list(static)
    index: dict[Key, list[int]] = {}
    for position, finding in enumerate(merged):
        index.setdefault(_key(finding), []).append(position)
    extra: list[Finding] = []
    for finding in dynamic:
        positions = index.get(_key(finding))
        if not positions:
            extra.append(finding)
            continue
        for position in positions:
            merged[position] = _both(merged[position], finding)
    ran = {(r.target.path, r.target.name): r for r in targets if r.status in ("passed", "failed")}
    merged = [
        _weighed(f, ran.get((f.path, f.target)), keep_static_errors) if f.source == "static" else f
        for f in merged
    ]
    return merged + extra


def _both(static: Finding, dynamic: Finding) -> Finding:
    evidence = [*static.evidence, f"dynamic: {dynamic.message}", *dynamic.evidence]
    # a dynamic mutant that reproduces a by-design construct only confirms what the code does
    severity = static.severity if static.by_design else max(static.severity, dynamic.severity)
    return replace(static, source="both", severity=severity, evidence=evidence)


def _weighed(finding: Finding, result: TargetResult | None, keep_static_errors: bool) -> Finding:
    """A static finding after a dynamic run of its target: downgraded on evidence, else annotated."""
    if result is None:
        return finding
    how = result.refuted.get(finding.code)
    if how is None and result.status == "passed" and finding.by_design and finding.code in REFERENCE_DESIGNS:
        how = DESIGN_CONFIRMED  # the reference ran the declared design (e.g. T5's scale 1) and matched
    if how is None:
        return replace(finding, evidence=[*finding.evidence, UNSEEN_NOTE])
    kept = keep_static_errors and finding.severity >= Severity.ERROR
    if result.status != "passed" or finding.severity == Severity.INFO or kept:
        return replace(finding, evidence=[*finding.evidence, f"dynamic: {how}"])
    return replace(
        finding,
        severity=Severity.INFO,
        message=f"{finding.message} ({REFUTED_REASON})",
        evidence=[*finding.evidence, f"dynamic: {how}"],
    )
