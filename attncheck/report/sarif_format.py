"""SARIF 2.1.0, for GitHub code scanning and other SARIF viewers.

Every catalogued rule is listed under ``tool.driver.rules`` (with its doc as
help), so a viewer can explain a code even when this run did not find it.
Files that could not be checked become tool execution notifications.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

from attncheck.catalogue import CODES, doc
from attncheck.findings import Finding, Severity, Span
from attncheck.pipeline import Outcome
from attncheck.report import cell_prefix, in_file, target_error_message, target_errors
from attncheck.sources import STDIN
from attncheck.version import __version__

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_RULE_INDEX = {code: index for index, code in enumerate(CODES)}


def document(outcome: Outcome) -> dict[str, Any]:
    run: dict[str, Any] = {
        "tool": {"driver": {
            "name": "attncheck",
            "version": __version__,
            "informationUri": "https://pypi.org/project/attncheck/",
            "rules": [_rule(code) for code in CODES],
        }},
        "results": [_result(f) for f in outcome.findings if f.code in _RULE_INDEX],
        "invocations": [_invocation(outcome)],
    }
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}


def _invocation(outcome: Outcome) -> dict[str, Any]:
    """Files that could not be checked and targets whose dynamic check ended in an error: each makes the
    exit code 1 without a result, so each is an error notification and the execution is not successful."""
    notifications = [
        {"level": "error" if e.level == "error" else "note", "message": {"text": cell_prefix(e.span) + e.message},
         "locations": [{"physicalLocation": _physical(e.path, e.span)}]}
        for e in outcome.errors
    ]
    failed = target_errors(outcome)
    notifications += [
        {"level": "error", "message": {"text": target_error_message(r)},
         "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri(r.target.path)},
                                             "region": {"startLine": r.target.line}}}]}
        for r in failed
    ]
    successful = not failed and not any(e.level == "error" for e in outcome.errors)
    return {"executionSuccessful": successful, "toolExecutionNotifications": notifications}


def write(outcome: Outcome, stream: TextIO, *, color: bool = False) -> None:
    json.dump(document(outcome), stream, indent=2, ensure_ascii=False)
    stream.write("\n")


def uri(path: str) -> str:
    """A relative URI for paths under the current folder, a ``file:`` URI otherwise."""
    if path == STDIN:
        return "stdin"
    resolved = Path(path).resolve()
    try:
        return quote(resolved.relative_to(Path.cwd().resolve()).as_posix())
    except ValueError:
        return resolved.as_uri()


def _rule(code: str) -> dict[str, Any]:
    info = CODES[code]
    rule: dict[str, Any] = {
        "id": code,
        "name": info.name,
        "shortDescription": {"text": f"{info.name}: {info.summary}"},
        "fullDescription": {"text": info.summary},
        "defaultConfiguration": {"level": LEVEL[info.severity]},
    }
    text = doc(code)
    if text:
        rule["help"] = {"text": text, "markdown": text}
    return rule


def _physical(path: str, span: Span | None) -> dict[str, Any]:
    """The artifact and, where known, the region. A notebook's region is in its ``.ipynb`` JSON
    text (line, column and character offset), where a viewer opens the file."""
    location: dict[str, Any] = {"artifactLocation": {"uri": uri(path)}}
    where = in_file(path, span)
    if span is None or where is None:
        return location
    line, column, offset = where
    region: dict[str, int] = {"startLine": line, "startColumn": column}
    if offset is not None:
        region["charOffset"] = offset
    elif span.end_line is not None:
        region["endLine"] = span.end_line
        if span.end_column is not None:
            region["endColumn"] = span.end_column + 1  # SARIF's endColumn is exclusive; ours is inclusive.
    location["region"] = region
    return location


def _result(finding: Finding) -> dict[str, Any]:
    span = finding.span
    text = cell_prefix(span) + finding.message + (f"\nhint: {finding.hint}" if finding.hint else "")
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "ruleIndex": _RULE_INDEX[finding.code],
        "level": LEVEL[finding.severity],
        "message": {"text": text},
        "locations": [{"physicalLocation": _physical(finding.path, span)}],
        "properties": {"source": finding.source},
    }
    if finding.target:
        result["properties"]["target"] = finding.target
    if span.cell is not None:
        result["locations"][0]["logicalLocations"] = [{"name": f"cell {span.cell}", "kind": "module"}]
        result["properties"].update(cell=span.cell, cellLine=span.line, cellColumn=span.column)
    return result
