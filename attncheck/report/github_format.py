"""GitHub Actions workflow commands: each finding becomes an annotation on the pull request."""

from __future__ import annotations

from typing import TextIO

from attncheck.catalogue import CODES
from attncheck.findings import Finding, Severity
from attncheck.pipeline import Outcome
from attncheck.report import target_error_message, target_errors

COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(finding: Finding) -> str:
    span = finding.span
    info = CODES.get(finding.code)
    title = f"{finding.code} {info.name}" if info else finding.code
    if span.cell is not None:
        title += f" (cell {span.cell})"
    fields = [f"file={_property(finding.path)}", f"line={span.line}", f"col={span.column}"]
    if span.end_line is not None:
        fields.append(f"endLine={span.end_line}")
    if span.end_column is not None:
        fields.append(f"endColumn={span.end_column}")
    fields.append(f"title={_property(title)}")
    message = finding.message + (f"\nhint: {finding.hint}" if finding.hint else "")
    return f"::{COMMAND[finding.severity]} {','.join(fields)}::{_data(message)}"


def write(outcome: Outcome, stream: TextIO, *, color: bool = False) -> None:
    for error in outcome.errors:
        command = "error" if error.level == "error" else "notice"
        stream.write(f"::{command} file={_property(error.path)},title=attncheck::{_data(error.message)}\n")
    for result in target_errors(outcome):
        where = f"file={_property(result.target.path)},line={result.target.line}"
        stream.write(f"::error {where},title=attncheck::{_data(target_error_message(result))}\n")
    for finding in outcome.findings:
        stream.write(annotation(finding) + "\n")
