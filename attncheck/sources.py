"""What attncheck reads: a Source is Python text plus a way back to the user's file.

A plain file maps one to one. A notebook's code cells are joined into one
module (IPython magics and shell escapes commented out, so the text parses and
line numbers stay put) and each line remembers its cell, so a finding can say
``cell 3, line 7``.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

from attncheck.findings import Span


@dataclass(frozen=True)
class Source:
    """Text to lint and where it came from (``-`` for stdin)."""

    path: str
    text: str
    # For notebooks: (first line of the cell in ``text``, 1-based cell number), sorted.
    cells: tuple[tuple[int, int], ...] = field(default=())

    @property
    def is_notebook(self) -> bool:
        return bool(self.cells)

    def locate(self, line: int, column: int = 1, end_line: int | None = None,
               end_column: int | None = None) -> Span:
        """A Span in the user's terms: file lines, or cell and line within the cell."""
        if not self.cells:
            return Span(line, column, end_line, end_column)
        starts = [start for start, _ in self.cells]
        index = max(bisect_right(starts, line) - 1, 0)
        start, cell = self.cells[index]
        end = end_line - start + 1 if end_line is not None else None
        return Span(line - start + 1, column, end, end_column, cell=cell)
