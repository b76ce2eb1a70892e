"""Output formats, one module per format, each with ``write(outcome, stream, color=...)``.

Reporters only read an Outcome; they never decide what is a problem (that is
the pipeline's job) and never import each other, so adding a format is adding
one module and one line below.
"""

from __future__ import annotations

import importlib
from collections import Counter
from typing import Any, Protocol, TextIO

from attncheck.findings import Finding, Severity, Span, TargetResult
from attncheck.pipeline import Outcome
from attncheck.sources import FileError
from attncheck.untrusted_text import shown

FORMATS = ("text", "json", "sarif", "github", "junit")
VIEWS = ("concise", "statistics")  # other human reports: ``--output-format concise``, ``--statistics``


class Writer(Protocol):
    def __call__(self, outcome: Outcome, stream: TextIO, *, color: bool) -> None: ...


def writer(name: str) -> Writer:
    """The ``write`` function of a format (imported on demand)."""
    if name not in FORMATS + VIEWS:
        raise ValueError(f"unknown format {name!r}")
    return importlib.import_module(f"attncheck.report.{name}_format").write


def location(finding: Finding) -> str:
    """``path:line:col``, or ``path:cell N:line:col`` for notebooks."""
    return place(finding.path, finding.span)


def place(path: str, span: Span | None) -> str:
    """``path:line:col`` (``path:cell N:line:col``), or the bare path when there is no span; the
    path as it can be shown (``untrusted_text``): a file named with ANSI escapes cannot erase lines."""
    path = shown(path)
    if span is None:
        return path
    cell = f"cell {span.cell}:" if span.cell is not None else ""
    return f"{path}:{cell}{span.line}:{span.column}"


def in_file(path: str, span: Span | None) -> tuple[int, int, int | None] | None:
    """(line, column, character offset or None) of a span in the file as stored: a notebook's cell
    line is found in its ``.ipynb`` JSON text (``notebook_positions``); None when it has no place."""
    if span is None:
        return None
    if span.cell is None:
        return span.line, span.column, None
    from attncheck.report.notebook_positions import place as json_place

    found = json_place(path, span)
    return (found.line, found.column, found.offset) if found else None


def cell_prefix(span: Span | None) -> str:
    """``cell 3, line 2, column 5: `` for a notebook span (a viewer of the JSON would not say), else ``""``."""
    if span is None or span.cell is None:
        return ""
    return f"cell {span.cell}, line {span.line}, column {span.column}: "


def target_errors(outcome: Outcome) -> list[TargetResult]:
    """The targets whose dynamic check ended in an error: each fails the run, so every format says so."""
    return [result for result in outcome.targets if result.status == "error"]


def target_error_message(result: TargetResult) -> str:
    """``Attn (class, line 3): dynamic check error: <reason>``."""
    target = result.target
    return f"{target.name} ({target_kind(result)}, line {target.line}): dynamic check error: {result.reason}"


def target_kind(result: TargetResult) -> str:
    return "class" if result.target.is_class else "function"


def summary(outcome: Outcome) -> dict[str, Any]:
    """Counts shared by the text and JSON reports."""
    severities = Counter(str(f.severity) for f in outcome.findings)
    statuses = Counter(result.status for result in outcome.targets)
    return {
        "files": outcome.files,
        "files_with_findings": len({f.path for f in outcome.findings if f.severity >= Severity.WARNING}),
        "problems": severities["error"] + severities["warning"],
        "errors": severities["error"],
        "warnings": severities["warning"],
        "infos": severities["info"],
        "file_errors": sum(1 for e in outcome.errors if e.level == "error"),
        "targets": {
            "total": len(outcome.targets),
            **{status: statuses[status] for status in ("passed", "failed", "skipped", "error")},
        },
    }


def summary_line(outcome: Outcome) -> str:
    """The last line of the human reports:
    ``Found 7 problems (6 errors, 1 warning) in 1 file; 2 targets: 1 passed, 1 failed``."""
    counts = summary(outcome)
    files = _plural(counts["files"], "file")
    if counts["problems"]:
        kinds = [
            _plural(counts[key], word) for key, word in (("errors", "error"), ("warnings", "warning")) if counts[key]
        ]
        line = f"Found {_plural(counts['problems'], 'problem')} ({', '.join(kinds)}) in {files}"
    else:
        line = f"No problems found in {files}"
    if counts["infos"]:
        line += f", {_plural(counts['infos'], 'info')}"
    if counts["file_errors"]:
        line += f"; {_plural(counts['file_errors'], 'file')} could not be checked"
    targets = counts["targets"]
    if targets["total"]:
        parts = [f"{targets[s]} {s}" for s in ("passed", "failed", "error", "skipped") if targets[s]]
        line += f"; {_plural(targets['total'], 'target')}: {', '.join(parts)}"
    return line


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def error_label(error: FileError) -> str:
    return "error" if error.level == "error" else "note"


def plain_file_errors(outcome: Outcome, stream: TextIO) -> None:
    """``path:line:col: error: message`` lines, without colour (the concise reports)."""
    for error in outcome.errors:
        stream.write(f"{place(error.path, error.span)}: {error_label(error)}: {error.message}\n")
