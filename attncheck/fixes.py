"""Apply the edits that rules attach to findings, or show them as a diff.

Edits index a Source's text. They are applied from the last to the first so
earlier offsets stay valid; an edit that overlaps one already applied is
skipped (the next run will offer it again against the new text).

A fix must not damage: the fixed text must parse (where the file did) and must
not give a finding the file did not have; a finding whose fix fails that is left
unfixed, and says why. Files are written atomically, never half.
"""

from __future__ import annotations

import ast
import difflib
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from attncheck.findings import Edit, Finding
from attncheck.line_table import split_lines
from attncheck.pipeline import Outcome
from attncheck.sources import STDIN, Source
from attncheck.static.engine import FileResult


@dataclass(frozen=True)
class FixedFile:
    """A file's text before and after its fixes, and which findings the fixes resolve."""

    source: Source
    text: str
    fixed: tuple[Finding, ...]
    refused: tuple[tuple[Finding, Finding], ...] = ()  # (finding, the same without its fix and saying why)

    def diff(self) -> str:
        before = split_lines(self.source.text, keepends=True)
        after = split_lines(self.text, keepends=True)
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
    if not chosen:
        return None
    check = _Check(source)
    refused: list[tuple[Finding, Finding]] = []
    if check.damage([e for f in chosen for e in f.fix]) is not None:  # find the culprits one by one
        kept = []
        for finding in chosen:
            reason = check.damage(finding.fix)
            if reason is None:
                kept.append(finding)
            else:
                refused.append((finding, _without_fix(finding, reason)))
        if kept and check.damage([e for f in kept for e in f.fix]) is not None:
            refused += [(f, _without_fix(f, "it does not combine with the other fixes")) for f in kept]
            kept = []
        chosen = kept
    text, _ = apply_edits(source.text, [e for f in chosen for e in f.fix])
    if text == source.text and not refused:
        return None
    return FixedFile(source, text, tuple(chosen), tuple(refused))


class _Check:
    """Whether edits would damage one file: a text that no longer parses, or a new finding."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.parses = _parses(source.text)
        self.before = _codes(source) if self.parses else Counter()

    def damage(self, edits: Sequence[Edit]) -> str | None:
        """Why applying ``edits`` would damage the file, or None when it would not."""
        text, _ = apply_edits(self.source.text, edits)
        if not self.parses:
            return None  # nothing to keep: the file is linted from libcst's error-tolerant view
        if not _parses(text):
            return "the fixed code would not parse"
        new = _codes(replace(self.source, text=text)) - self.before
        return f"the fixed code would have a new finding ({', '.join(sorted(new))})" if new else None


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _codes(source: Source) -> Counter[str]:
    from attncheck.static.engine import lint
    from attncheck.static.rules import all_rules

    return Counter(f.code for f in lint(source, all_rules()).findings)


def _without_fix(finding: Finding, reason: str) -> Finding:
    note = f"no automatic fix: {reason}"
    return replace(finding, fix=(), hint=f"{finding.hint}; {note}" if finding.hint else note)


def unfixable_reason(source: Source) -> str | None:
    """Why ``--fix`` leaves a file alone, or None when it may write it."""
    if source.path == STDIN:
        return "fixes are not written for standard input (use --diff)"
    if source.is_notebook:
        return "fixes are not written into notebooks (use --diff to see them)"
    if source.markdown:
        return "fixes are not written into Markdown files (use --diff to see them)"
    return None


def _write(fixed: FixedFile) -> None:
    """Write the fixed text back in the file's own encoding, atomically: into a temporary file
    beside it, with its mode, then renamed over it, so that no reader ever sees half a file."""
    path = fixed.source.path
    data = fixed.text.encode(fixed.source.encoding)
    mode = os.stat(path).st_mode & 0o7777
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".attncheck-")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


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
        refused = {id(finding): without for finding, without in fixed.refused}
        outcome.findings = [refused.get(id(f), f) for f in outcome.findings]
        if not fixed.fixed:
            continue
        if not write:
            count += len(fixed.fixed)
            if result.source.is_notebook:  # a diff of the joined cells would not apply to the .ipynb
                places = ", ".join(f"cell {f.span.cell} line {f.span.line} ({f.code})" for f in fixed.fixed)
                print(f"{result.source.path}: no diff for a notebook (it would not apply to the .ipynb JSON); "
                      f"fixes available at {places}", file=sys.stderr)
                continue
            if result.source.markdown:  # the diff's context would be the blanked prose, not the file's
                places = ", ".join(f"line {f.span.line} ({f.code})" for f in fixed.fixed)
                print(f"{result.source.path}: no diff for a Markdown file (it would not apply to the prose "
                      f"around its Python blocks); fixes available at {places}", file=sys.stderr)
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
