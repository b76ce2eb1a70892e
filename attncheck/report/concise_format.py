"""``--output-format concise``: one line per finding, ``path:line:col: CODE message``, as ruff's.

Files that could not be checked and targets that did not pass get one line each too,
so everything that decides the exit code is on screen; then the summary line.
"""

from __future__ import annotations

from typing import TextIO

from attncheck.pipeline import Outcome
from attncheck.report import location, place, plain_file_errors, summary_line


def write(outcome: Outcome, stream: TextIO, *, color: bool = False) -> None:
    """Plain lines, never coloured: this is the pre-commit hook's output, so it stays free of rich."""
    plain_file_errors(outcome, stream)
    for finding in outcome.findings:
        stream.write(f"{location(finding)}: {finding.code} {finding.message}\n")
    for result in outcome.targets:
        if result.status in ("failed", "error"):
            target = result.target
            reason = f": {result.reason}" if result.reason else ""
            stream.write(f"{place(target.path, None)}:{target.line}: {target.name}: {result.status}{reason}\n")
    stream.write(summary_line(outcome) + "\n")
