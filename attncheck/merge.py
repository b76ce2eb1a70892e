"""Join the static and dynamic findings into what the user reads.

A mistake seen both ways is reported once, at the static location, with both
kinds of evidence (source ``both``). A static finding on a target the dynamic
check ran and found correct is kept, but downgraded to info: the code looked
wrong, the behaviour was right, and the user deserves to know both. Not so in an isolated run
(CI, grading: ``keep_static_errors``): there code that detects the checker can pass the dynamic
check while its normal path is wrong, so a static error stays an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from attncheck import catalogue
from attncheck.findings import Finding, Severity, TargetResult

PASSED_REASON = "the dynamic check ran this target and it matched the reference"

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
    passed = {(result.target.path, result.target.name) for result in targets if result.status == "passed"}
    merged = [
        _downgraded(f) if f.source == "static" and (f.path, f.target) in passed
        and not (keep_static_errors and f.severity >= Severity.ERROR) else f
        for f in merged
    ]
    return merged + extra


def _both(static: Finding, dynamic: Finding) -> Finding:
    evidence = [*static.evidence, f"dynamic: {dynamic.message}", *dynamic.evidence]
    # a dynamic mutant that reproduces a by-design construct only confirms what the code does
    designed = catalogue.by_design(static.code, static.severity)
    severity = static.severity if designed else max(static.severity, dynamic.severity)
    return replace(static, source="both", severity=severity, evidence=evidence)


def _downgraded(finding: Finding) -> Finding:
    if finding.severity == Severity.INFO:
        return finding
    return replace(finding, severity=Severity.INFO, message=f"{finding.message} ({PASSED_REASON})")
