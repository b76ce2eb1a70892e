"""Text from someone the checker does not trust, made safe to show.

A student's folder name and a child's exception message end up on the grader's terminal, in a
table, a CSV and a report. Some characters there act instead of showing: a newline writes a
forged row ("alice  100/100  graded"), ANSI escapes and carriage returns erase or move lines,
bidirectional overrides reverse what follows, and a lone surrogate (a file name that is not
UTF-8) stops the writer that meets it. Each such character is written as its escape instead
(``\\n``, ``\\x1b``, ``\\u202e``; a byte that is not UTF-8 as ``\\xff``): the text stays readable,
and two names that differ still differ.
"""

from __future__ import annotations

_SURROGATE_ESCAPES = range(0xDC80, 0xDD00)  # the bytes os.fsdecode could not decode, as lone surrogates


def shown(text: str, keep: str = "") -> str:
    """``text`` with every character that is not printable (but those in ``keep``) escaped."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() or char in keep else _escape(char) for char in text)


def _escape(char: str) -> str:
    if ord(char) in _SURROGATE_ESCAPES:
        return f"\\x{ord(char) - 0xDC00:02x}"
    return char.encode("unicode_escape", errors="backslashreplace").decode("ascii")
