"""Lines as Python's parser counts them, for every position attncheck reports or edits.

Python's tokenizer (and libcst's) ends a line at ``\\n``, ``\\r\\n`` or a lone
``\\r``, and at nothing else. ``str.splitlines`` also splits at ``\\x0b``, ``\\x0c``,
``\\x1c``-``\\x1e``, ``\\x85``, ``\\u2028`` and ``\\u2029``, which Python keeps inside
a line (a form feed in a comment); a table built with it puts every later line one
too low, and one that counts only ``\\n`` puts a lone-``\\r`` file on one line, so
that a fix's offset lands on an unrelated line. Positions, the large-file scan and
fix offsets all read their lines here.
"""

from __future__ import annotations

import re

# The one line break other than ``\n`` (alone or before one).
OTHER_BREAKS = "\r"
_BREAK = re.compile(r"\r\n?|\n")
_LINE = re.compile(r"[^\r\n]*(?:\r\n?|\n)|[^\r\n]+\Z")
# Where ``str.splitlines`` splits and Python does not, plus ``\r``: a text without any of
# them splits the same both ways, and ``str.splitlines`` does it fastest.
_SPLITLINES_DIFFERS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def line_starts(text: str) -> list[int]:
    """The offset in ``text`` at which each of its lines starts (one more past a final break)."""
    if OTHER_BREAKS in text:
        return [0, *(match.end() for match in _BREAK.finditer(text))]
    starts = [0]
    found = text.find("\n")
    while found >= 0:
        starts.append(found + 1)
        found = text.find("\n", found + 1)
    return starts


def split_lines(text: str, keepends: bool = False) -> list[str]:
    """``text``'s lines as Python counts them (``str.splitlines``'s contract otherwise)."""
    if not any(character in text for character in _SPLITLINES_DIFFERS):
        return text.splitlines(keepends)
    lines = _LINE.findall(text)
    return lines if keepends else [_BREAK.sub("", line) for line in lines]


def newline_of(text: str) -> str:
    """The line break ``text`` uses (its first), ``\\n`` when it has none: what an inserted line ends with."""
    found = _BREAK.search(text)
    return found.group() if found else "\n"


def line_start(text: str, offset: int) -> int:
    """Where the line holding ``offset`` starts."""
    return max(text.rfind("\n", 0, offset), text.rfind("\r", 0, offset)) + 1


def next_line(text: str, offset: int) -> int | None:
    """Where the line after the one holding ``offset`` starts; None on the last line."""
    found = _BREAK.search(text, offset)
    return found.end() if found else None
