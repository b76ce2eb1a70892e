"""Apply the edits that rules attach to findings, or show them as a diff.

Edits index a Source's text. They are applied from the last to the first so
earlier offsets stay valid; an edit that overlaps one already applied is
skipped (the next run will offer it again against the new text).
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from attncheck.findings import Edit, Finding
from attncheck.pipeline import Outcome
from attncheck.sources import STDIN, Source
from attncheck.static.engine import FileResult


@dataclass(frozen=True)
class FixedFile:
    """A file's text before and after its fixes, and which findings the fixes resolve."""

    source: Source
    text: str
    fixed: tuple[Finding, ...]

    def diff(self) -> str:
        before = self.source.text.splitlines(keepends=True)
        after = self.text.splitlines(keepends=True)
        name = self.source.path
        return "".join(difflib.unified_diff(before, after, f"a/{name}", f"b/{name}"))


def apply_edits(text: str, edits: Iterable[Edit]) -> tuple[str, set[Edit]]:
    """``text`` with ``edits`` applied, and the set applied.

    Edits are accepted in order of position (an edit overlapping an earlier one,
    or out of range, is skipped) and applied from the last to the first, so the
    offsets of the ones before stay valid.
    """
    accepted: list[Edit] = []
    for edit in sorted(set(edits), key=lambda e: (e.start, e.end)):
        if 0 <= edit.start <= edit.end <= len(text) and not any(_overlap(edit, kept) for kept in accepted):
            accepted.append(edit)
    for edit in reversed(accepted):
        text = text[: edit.start] + edit.replacement + text[edit.end :]
    return text, set(accepted)


def _overlap(a: Edit, b: Edit) -> bool:
    return (a.start < b.end and b.start < a.end) or (a.start == a.end == b.start == b.end)


def fix_source(source: Source, findings: Iterable[Finding]) -> FixedFile | None:
    """The fixes of one file's findings, or None when nothing changes.

    A finding's edits go in together or not at all; when two findings' edits
    overlap, the one reported first wins. Identical edits do not conflict: two
    findings that both add ``import math`` at the same place share the one insert.
    """
    chosen: list[Finding] = []
    edits: list[Edit] = []
    for finding in findings:
        if finding.fix and not any(new != old and _overlap(new, old) for new in finding.fix for old in edits):
            chosen.append(finding)
            edits.extend(finding.fix)
    text, _ = apply_edits(source.text, edits)
    if text == source.text:
        return None
    return FixedFile(source, text, tuple(chosen))


def unfixable_reason(source: Source) -> str | None:
    """Why ``--fix`` leaves a file alone, or None when it may write it."""
    if source.path == STDIN:
        return "fixes are not written for standard input (use --diff)"
    if source.is_notebook:
        return "fixes are not written into notebooks (use --diff to see them)"
    return None


def _write(fixed: FixedFile) -> None:
    """Write the fixed text back in the file's own encoding."""
    with open(fixed.source.path, "w", encoding=fixed.source.encoding, newline="") as handle:
        handle.write(fixed.text)


def apply_fixes(outcome: Outcome, results: Iterable[FileResult], *, write: bool) -> int:
    """Print the fixes as a diff (``write`` False) or write them.

    Returns how many findings the fixes resolve (written, or shown in the diff); the caller
    checks the written files again. Notes about files left alone go to stderr.
    """
    by_path: dict[str, list[Finding]] = {}
    for finding in outcome.findings:
        by_path.setdefault(finding.path, []).append(finding)
    count = 0
    for result in results:
        fixed = fix_source(result.source, by_path.get(result.source.path, []))
        if fixed is None:
            continue
        if not write:
            count += len(fixed.fixed)
            if result.source.is_notebook:  # a diff of the joined cells would not apply to the .ipynb
                places = ", ".join(f"cell {f.span.cell} line {f.span.line} ({f.code})" for f in fixed.fixed)
                print(f"{result.source.path}: no diff for a notebook (it would not apply to the .ipynb JSON); "
                      f"fixes available at {places}", file=sys.stderr)
                continue
            sys.stdout.write(fixed.diff())
            continue
        reason = unfixable_reason(result.source)
        if reason:
            print(f"{result.source.path}: {reason}", file=sys.stderr)
            continue
        _write(fixed)
        count += len(fixed.fixed)
    return count
