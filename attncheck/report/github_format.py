"""GitHub Actions workflow commands: each finding becomes an annotation on the pull request."""

from __future__ import annotations

from typing import TextIO

from attncheck.catalogue import CODES
from attncheck.findings import Finding, Severity, Span
from attncheck.pipeline import Outcome
from attncheck.report import cell_prefix, in_file, target_error_message, target_errors

COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def _position(path: str, span: Span | None) -> list[str]:
    """``file=``, and ``line=``/``col=`` where the file has the place: for a notebook, in its JSON
    text (the message names the cell), since that is the file GitHub shows."""
    fields = [f"file={_property(path)}"]
    where = in_file(path, span)
    if span is not None and where is not None:
        fields += [f"line={where[0]}", f"col={where[1]}"]
        if span.cell is None and span.end_line is not None:
            fields.append(f"endLine={span.end_line}")
            if span.end_column is not None:
                fields.append(f"endColumn={span.end_column}")
    return fields


def annotation(finding: Finding) -> str:
    span = finding.span
    info = CODES.get(finding.code)
    title = f"{finding.code} {info.name}" if info else finding.code
    if span.cell is not None:
        title += f" (cell {span.cell})"
    fields = [*_position(finding.path, span), f"title={_property(title)}"]
    message = cell_prefix(span) + finding.message + (f"\nhint: {finding.hint}" if finding.hint else "")
    return f"::{COMMAND[finding.severity]} {','.join(fields)}::{_data(message)}"


def write(outcome: Outcome, stream: TextIO, *, color: bool = False) -> None:
    for error in outcome.errors:
        command = "error" if error.level == "error" else "notice"
        fields = ",".join(_position(error.path, error.span))
        stream.write(f"::{command} {fields},title=attncheck::{_data(cell_prefix(error.span) + error.message)}\n")
    for result in target_errors(outcome):
        where = f"file={_property(result.target.path)},line={result.target.line}"
        stream.write(f"::error {where},title=attncheck::{_data(target_error_message(result))}\n")
    for finding in outcome.findings:
        stream.write(annotation(finding) + "\n")
