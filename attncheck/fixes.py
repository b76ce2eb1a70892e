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
    """``text`` with the non-overlapping ``edits`` applied, and the set applied."""
    applied: set[Edit] = set()
    limit = len(text) + 1
    for edit in sorted(set(edits), key=lambda e: (e.start, e.end), reverse=True):
        if not 0 <= edit.start <= edit.end <= len(text) or edit.end > limit:
            continue
        text = text[: edit.start] + edit.replacement + text[edit.end :]
        applied.add(edit)
        limit = edit.start
    return text, applied


def fix_source(source: Source, findings: Iterable[Finding]) -> FixedFile | None:
    """The fixes of one file's findings, or None when nothing changes."""
    fixable = [f for f in findings if f.fix]
    if not fixable:
        return None
    text, applied = apply_edits(source.text, (edit for f in fixable for edit in f.fix))
    if text == source.text:
        return None
    fixed = tuple(f for f in fixable if set(f.fix) <= applied)
    return FixedFile(source, text, fixed)


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


def apply_fixes(outcome: Outcome, results: Iterable[FileResult], *, write: bool) -> bool:
    """Print the fixes as a diff (``write`` False) or write them and drop the fixed findings.

    Returns whether any file has a fix. Notes about files left alone go to stderr.
    """
    by_path: dict[str, list[Finding]] = {}
    for finding in outcome.findings:
        by_path.setdefault(finding.path, []).append(finding)
    changed = False
    fixed_ids: set[int] = set()
    for result in results:
        fixed = fix_source(result.source, by_path.get(result.source.path, []))
        if fixed is None:
            continue
        changed = True
        if not write:
            sys.stdout.write(fixed.diff())
            continue
        reason = unfixable_reason(result.source)
        if reason:
            print(f"{result.source.path}: {reason}", file=sys.stderr)
            continue
        _write(fixed)
        fixed_ids.update(id(f) for f in fixed.fixed)
    if write and fixed_ids:
        outcome.findings = [f for f in outcome.findings if id(f) not in fixed_ids]
        print(f"Fixed {len(fixed_ids)} problem(s).", file=sys.stderr)
    return changed
