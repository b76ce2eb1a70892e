"""The human report (``--output-format full``): one block per finding with a code frame
and a hint, the dynamic checks of the targets, and a one-line summary.

On a terminal every target with checks gets a compact table of them. To a pipe or a
file the report is for reading back and grepping: a passing target says nothing, a
failing one lists its failing checks one per line in full, with no column cut and no
padding; ``--show-checks`` lists every check of every target there too.

Colour comes from rich and only on a terminal (``--no-color`` and ``NO_COLOR``
turn it off); without colour the text is plain and stable enough to grep.
"""

from __future__ import annotations

from typing import TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from attncheck.findings import Finding, Severity, TargetResult
from attncheck.line_table import split_lines
from attncheck.pipeline import STATIC_ONLY_REASON, Outcome
from attncheck.progress import is_terminal
from attncheck.report import error_label, location, place, summary_line
from attncheck.sources import Source

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
_STATUS_STYLE = {"passed": "green", "failed": "bold red", "skipped": "dim", "error": "magenta"}
CONTEXT = 1  # lines shown above the finding's line


def console_for(stream: TextIO, *, color: bool) -> Console:
    return Console(
        file=stream,
        color_system="auto" if color else None,
        no_color=not color,
        force_terminal=color or None,
        highlight=False,
        soft_wrap=True,
        emoji=False,
    )


def write(outcome: Outcome, stream: TextIO, *, color: bool = False, show_checks: bool = False) -> None:
    console = console_for(stream, color=color)
    file_errors(console, outcome)
    for finding in outcome.findings:
        _finding(console, finding, outcome.sources.get(finding.path))
    tables = is_terminal(stream)
    shown = [r for r in outcome.targets if _shown(r, every_check=tables or show_checks)]
    for result in shown:
        _target(console, result, table=tables, every_check=show_checks or tables)
    if outcome.findings or outcome.errors or shown:
        console.print()
    console.print(summary_line(outcome))


def file_errors(console: Console, outcome: Outcome) -> None:
    """``path: error: message`` for each file that could not be checked."""
    for error in outcome.errors:
        style = "bold red" if error.level == "error" else "cyan"
        console.print(Text.assemble((place(error.path, error.span), "bold"), ": ", (error_label(error), style),
                                    f": {error.message}"))


def _shown(result: TargetResult, *, every_check: bool) -> bool:
    """Whether a target gets its lines: one that did not pass always; a passing one only with its checks."""
    if result.status in ("failed", "error") or _skipped_dynamically(result):
        return True
    return every_check and bool(result.checks)


def _finding(console: Console, finding: Finding, source: Source | None) -> None:
    head = Text.assemble(
        (location(finding), "bold"),
        ": ",
        (finding.code, _STYLE[finding.severity]),
        f" [{finding.severity}] ",
        finding.message,
    )
    if finding.source != "static":
        head.append(f" ({finding.source})", style="dim")
    console.print(head)
    if source is not None:
        for line in frame(source, finding):
            console.print(Text(line, style="dim" if not line.startswith(" >") else ""))
    for item in finding.evidence:
        console.print(Text(f"  evidence: {item}", style="dim"))
    if finding.hint:
        console.print(Text.assemble(("  hint: ", "green"), finding.hint))


def _skipped_dynamically(result: TargetResult) -> bool:
    """A target the dynamic stage could not bind (its reason holds the declaration hint)."""
    return result.status == "skipped" and result.reason not in ("", STATIC_ONLY_REASON)


def frame(source: Source, finding: Finding) -> list[str]:
    """The finding's line with CONTEXT lines above, numbered as the user numbers them."""
    lines = split_lines(source.text)
    at = source.file_line(finding.span)
    if not 1 <= at <= len(lines):
        return []
    first = at
    while first > 1 and at - first < CONTEXT and source.locate(first - 1).cell == finding.span.cell:
        first -= 1
    shown = [(number, source.locate(number).line) for number in range(first, at + 1)]
    width = len(str(max(label for _, label in shown)))
    out = []
    for number, label in shown:
        marker = " >" if number == at else "  "
        out.append(f"{marker} {label:>{width}} | {lines[number - 1]}".rstrip())
    column = max(finding.span.column, 1)
    out.append(f"   {' ' * width} | {' ' * (column - 1)}^")
    return out


def _target(console: Console, result: TargetResult, *, table: bool, every_check: bool) -> None:
    """``path:line: Name: failed (cpu, bubblewrap)`` and its checks: a table on a terminal, else lines.

    In the table, failed checks show their whole detail (folded); the others keep to one line,
    cut with an ellipsis, so the table stays compact at 80 columns.
    """
    target = result.target
    status = (result.status, _STATUS_STYLE.get(result.status, ""))
    where = ", ".join(part for part in (result.device, result.isolation) if part)
    console.print(
        Text.assemble(
            (f"{place(target.path, None)}:{target.line}: ", "bold"),
            f"{target.name}: ",
            status,
            (f" ({where})" if where else "", "dim"),
            f": {result.reason}" if result.reason else "",
        )
    )
    checks = [c for c in result.checks if every_check or c.status in ("failed", "error")]
    if not checks:
        return
    if not table:
        for check in checks:
            detail = f": {check.detail}" if check.detail else ""
            console.print(Text.assemble(f"    {check.name}: ", (check.status, _STATUS_STYLE.get(check.status, "")),
                                        detail))
        return
    rows = Table(box=None, show_header=False, pad_edge=False, padding=(0, 2, 0, 0))
    rows.add_column("check", no_wrap=True)
    rows.add_column("status", no_wrap=True)
    rows.add_column("detail", overflow="fold")
    for check in checks:
        wrap = check.status in ("failed", "error")
        detail = Text(check.detail, no_wrap=not wrap, overflow="fold" if wrap else "ellipsis")
        rows.add_row(check.name, Text(check.status, style=_STATUS_STYLE.get(check.status, "")), detail)
    console.print(rows)
