"""The human report: one block per finding with a code frame and a hint,
a compact table of dynamic checks per target, and a one-line summary.

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
from attncheck.report import location, summary
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


def write(outcome: Outcome, stream: TextIO, *, color: bool = False) -> None:
    console = console_for(stream, color=color)
    for error in outcome.errors:
        label = "error" if error.level == "error" else "note"
        style = "bold red" if label == "error" else "cyan"
        console.print(Text.assemble((error.path, "bold"), ": ", (label, style), f": {error.message}"))
    for finding in outcome.findings:
        _finding(console, finding, outcome.sources.get(finding.path))
    shown = [r for r in outcome.targets if r.checks or r.status == "error" or _skipped_dynamically(r)]
    for result in shown:
        _target(console, result)
    if outcome.findings or outcome.errors or shown:
        console.print()
    console.print(summary_line(outcome))


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
        out.append(f"{marker} {label:>{width}} | {lines[number - 1]}")
    column = max(finding.span.column, 1)
    out.append(f"   {' ' * width} | {' ' * (column - 1)}^")
    return out


def _target(console: Console, result: TargetResult) -> None:
    """``path:line: Name: failed (cpu, bubblewrap)`` and one row per check.

    Failed checks show their whole detail (folded); the others keep to one line, cut with an
    ellipsis, so the table stays compact at 80 columns.
    """
    target = result.target
    status = (result.status, _STATUS_STYLE.get(result.status, ""))
    where = ", ".join(part for part in (result.device, result.isolation) if part)
    console.print(
        Text.assemble(
            (f"{target.path}:{target.line}: ", "bold"),
            f"{target.name}: ",
            status,
            (f" ({where})" if where else "", "dim"),
            f": {result.reason}" if result.reason else "",
        )
    )
    if not result.checks:
        return
    table = Table(box=None, show_header=False, pad_edge=False, padding=(0, 2, 0, 0))
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for check in result.checks:
        wrap = check.status in ("failed", "error")
        detail = Text(check.detail, no_wrap=not wrap, overflow="fold" if wrap else "ellipsis")
        table.add_row(check.name, Text(check.status, style=_STATUS_STYLE.get(check.status, "")), detail)
    console.print(table)


def summary_line(outcome: Outcome) -> str:
    """``Found 7 problems (6 errors, 1 warning) in 1 file; 2 targets: 1 passed, 1 failed``."""
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
