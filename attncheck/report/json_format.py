"""The JSON report: a stable contract (``schema.json`` beside this file).

Keys may be added, never renamed or removed: tools parse this.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from attncheck.catalogue import CODES
from attncheck.findings import Finding, TargetResult
from attncheck.pipeline import Outcome
from attncheck.report import summary, target_kind
from attncheck.sources import FileError
from attncheck.version import __version__


def document(outcome: Outcome) -> dict[str, Any]:
    return {
        "version": __version__,
        "findings": [_finding(f) for f in outcome.findings],
        "targets": [_target(t) for t in outcome.targets],
        "errors": [_error(e) for e in outcome.errors],
        "summary": summary(outcome),
    }


def write(outcome: Outcome, stream: TextIO, *, color: bool = False) -> None:
    # One write: json.dump writes each token separately, which was most of a cached run.
    stream.write(json.dumps(document(outcome), indent=2, ensure_ascii=False) + "\n")


def _error(error: FileError) -> dict[str, Any]:
    span = error.span
    return {"path": error.path, "message": error.message, "level": error.level,
            "line": span.line if span else None, "column": span.column if span else None,
            "cell": span.cell if span else None}


def _finding(finding: Finding) -> dict[str, Any]:
    span = finding.span
    info = CODES.get(finding.code)
    return {
        "code": finding.code,
        "name": info.name if info else finding.code,
        "severity": str(finding.severity),
        "path": finding.path,
        "line": span.line,
        "column": span.column,
        "end_line": span.end_line,
        "end_column": span.end_column,
        "message": finding.message,
        "source": finding.source,
        "target": finding.target,
        "cell": span.cell,
        "hint": finding.hint,
        "evidence": list(finding.evidence),
        "fixable": bool(finding.fix),
    }


def _target(result: TargetResult) -> dict[str, Any]:
    target = result.target
    return {
        "path": target.path,
        "name": target.name,
        "line": target.line,
        "kind": target_kind(result),
        "kinds": list(target.kinds),
        "status": result.status,
        "reason": result.reason,
        "device": result.device,
        "isolation": result.isolation,
        "checks": [{"name": c.name, "status": c.status, "detail": c.detail} for c in result.checks],
    }
