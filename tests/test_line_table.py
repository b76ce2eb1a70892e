"""Lines are counted as Python's parser counts them, for positions, the large-file scan and fixes.

Python ends a line at ``\\n``, ``\\r\\n`` and a lone ``\\r`` only; ``str.splitlines``
also splits at form feeds and six other characters. Each of those characters, put
in a comment above the attention code of a large file (the scan) and of a small
one, must leave every finding where it was, and a file whose lines end in ``\\r``
or ``\\r\\n`` must be reported and fixed exactly as its ``\\n`` twin.
"""

from __future__ import annotations

import pytest

from attncheck.fixes import fix_source
from attncheck.line_table import line_starts, split_lines
from attncheck.sources import Source
from attncheck.static.engine import lint
from attncheck.static.rules import all_rules
from attncheck.static.tree.regions import MIN_LINES

_ATTENTION = (
    "import torch.nn.functional as F\n"
    "def attention(q, k, v):\n"
    "    scores = q @ k.transpose(-2, -1)\n"
    "    return F.softmax(scores, dim=2) @ v\n"
)
_NOT_BREAKS = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


def _findings(text: str) -> list[tuple[str, int, int, int | None, int | None]]:
    result = lint(Source("example.py", text), all_rules())
    assert result.error is None, result.error
    return sorted((f.code, f.span.line, f.span.column, f.span.end_line, f.span.end_column) for f in result.findings)


@pytest.mark.parametrize("text", ["", "a", "a\n", "a\r\nb", "a\rb\r", "a\x0cb\n\x85c\u2028", "\r\r\n\n"])
def test_lines_are_the_tokenizers(text: str) -> None:
    expected = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if expected and expected[-1] == "":
        expected.pop()
    assert split_lines(text) == expected
    assert "".join(split_lines(text, keepends=True)) == text
    starts = line_starts(text)
    assert len(starts) == text.count("\n") + text.count("\r") - text.count("\r\n") + 1
    assert all(text[start - 1] in "\r\n" for start in starts[1:])


@pytest.mark.parametrize("filler", [2, MIN_LINES + 20], ids=["small", "large"])
@pytest.mark.parametrize("character", _NOT_BREAKS, ids=[hex(ord(c)) for c in _NOT_BREAKS])
def test_characters_python_keeps_in_a_line_move_no_finding(character: str, filler: int) -> None:
    head = "".join(f"x_{n} = {n}\n" for n in range(filler))
    plain = _findings(f"{head}# comment\n{_ATTENTION}")
    assert plain
    assert _findings(f"{head}# {character} comment\n{_ATTENTION}") == plain


@pytest.mark.parametrize("filler", [2, MIN_LINES + 20], ids=["small", "large"])
@pytest.mark.parametrize("ending", ["\r", "\r\n"], ids=["lone CR", "CRLF"])
def test_other_line_endings_give_the_same_findings_and_fixes(ending: str, filler: int) -> None:
    text = "".join(f"x_{n} = {n}\n" for n in range(filler)) + _ATTENTION + 'message = "attention is all you need"\n'
    other = text.replace("\n", ending)
    assert _findings(other) == _findings(text)
    fixed = fix_source(Source("example.py", text), lint(Source("example.py", text), all_rules()).findings)
    fixed_other = fix_source(Source("example.py", other), lint(Source("example.py", other), all_rules()).findings)
    assert fixed is not None and fixed_other is not None
    assert fixed_other.text == fixed.text.replace("\n", ending)
