"""``--output-format concise``: one line per finding, ``path:line:col: CODE message``, as ruff's.

Files that could not be checked and targets that did not pass get one line each too,
so everything that decides the exit code is on screen; then the summary line.
"""

from __future__ import annotations

from typing import TextIO

from attncheck.pipeline import Outcome
from attncheck.report import location
from attncheck.report.text_format import console_for, file_errors, summary_line


def write(outcome: Outcome, stream: TextIO, *, color: bool = False) -> None:
    console = console_for(stream, color=color)
    file_errors(console, outcome)
    for finding in outcome.findings:
        console.print(f"{location(finding)}: {finding.code} {finding.message}", markup=False)
    for result in outcome.targets:
        if result.status in ("failed", "error"):
            target = result.target
            reason = f": {result.reason}" if result.reason else ""
            console.print(f"{target.path}:{target.line}: {target.name}: {result.status}{reason}", markup=False)
    console.print(summary_line(outcome), markup=False)
