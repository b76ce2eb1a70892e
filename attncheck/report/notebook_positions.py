"""Where a notebook cell's line is in the ``.ipynb`` file itself.

Findings in notebooks are counted in cells (``cell 3, line 2``), which a person reads
well; but a SARIF viewer or a GitHub annotation opens the ``.ipynb`` as the JSON text it
is, so line 2 of the file is nowhere near cell 3 (and a notebook saved compact is one
line). For those, each cell line is found in the file's JSON text: its line, column and
character offset there. The search walks the text forward, cell after cell, for each
line as JSON encodes it, so it follows the notebook's own order whatever its indentation.
A file that cannot be read back (standard input, changed since) gives no position.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from attncheck.findings import Span


@dataclass(frozen=True)
class JsonPlace:
    """A place in the ``.ipynb`` text: 1-based line and column, 0-based character offset."""

    line: int
    column: int
    offset: int


def place(path: str, span: Span) -> JsonPlace | None:
    """The place in ``path``'s JSON text of a notebook span's start (its cell, line and column)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    found = _cell_lines(os.path.realpath(path), stat.st_mtime_ns, stat.st_size).get((span.cell, span.line))
    if found is None:
        return None
    raw, start, text = found
    offset = start + len(_encoded(text[: max(span.column - 1, 0)]))
    line = raw.count("\n", 0, offset) + 1
    return JsonPlace(line, offset - raw.rfind("\n", 0, offset), offset)


def _encoded(text: str, ascii_only: bool = False) -> str:
    return json.dumps(text, ensure_ascii=ascii_only)[1:-1]


@cache
def _cell_lines(path: str, mtime_ns: int, size: int) -> dict[tuple[int | None, int], tuple[str, int, str]]:
    """(cell, line) -> (the file's text, offset of the line's first character in it, the line).
    Read once per version of the file (``mtime_ns`` and ``size`` are the cache's key, with ``path``)."""
    try:
        raw = Path(path).read_text(encoding="utf-8")
        cells = json.loads(raw).get("cells", [])
    except (OSError, ValueError, AttributeError):
        return {}
    found: dict[tuple[int | None, int], tuple[str, int, str]] = {}
    at = 0
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else str(source)
        for index, line in enumerate(text.splitlines(keepends=True), start=1):
            offset = _find(raw, line, at)
            if offset < 0:
                return found  # the file is not as it was read: stop rather than guess
            found[(number, index)] = (raw, offset, line)
            at = offset + len(_encoded(line))
    return found


def _find(raw: str, line: str, at: int) -> int:
    """The offset of ``line``'s JSON encoding in ``raw`` from ``at``, as written with or without escapes."""
    hits = [raw.find(_encoded(line, ascii_only), at) for ascii_only in (False, True)]
    hits = [hit for hit in hits if hit >= 0]
    return min(hits) if hits else -1
