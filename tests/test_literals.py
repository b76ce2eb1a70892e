"""Number literals are read the way Python reads them, whatever their spelling or size.

Every analysis reads literals through ``facts.integer_value``/``number_value``, so
respelling each decimal integer of every rule example (hex, octal, binary,
underscores) must leave its findings exactly as they were, and literals too long
for ``int()`` or too large for a float are read, not raised on.
"""

from __future__ import annotations

import io
import textwrap
import tokenize

import libcst as cst
import pytest

from attncheck.static.facts import MAX_INTEGER_CHARS, integer_value, number_value, whole_number
from attncheck.static.rules import all_rules
from tests.conftest import lint_text

_SPELLINGS = {"hex": hex, "octal": oct, "binary": bin, "underscores": lambda n: "_".join(str(n))}


def _respelled(code: str, spell) -> str:
    """``code`` with each decimal integer token written by ``spell``."""
    tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    lines = code.splitlines(keepends=True)
    # Right to left, so earlier positions stay put.
    for token in reversed(tokens):
        if token.type == tokenize.NUMBER and token.string.isdigit() and (token.string == "0" or token.string[0] != "0"):
            row, column = token.start
            line = lines[row - 1]
            lines[row - 1] = line[:column] + spell(int(token.string)) + line[token.end[1]:]
    return "".join(lines)


def _invalid_examples() -> list:
    return [
        pytest.param(textwrap.dedent(example.code), id=f"{rule.code}-{index}")
        for rule in all_rules()
        for index, example in enumerate(rule.INVALID)
        if any(c.isdigit() for c in example.code)
    ]


def _codes(text: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_text(text))


@pytest.mark.parametrize("code", _invalid_examples())
def test_every_spelling_of_an_integer_gives_the_same_findings(code: str) -> None:
    expected = _codes(code)
    for name, spell in _SPELLINGS.items():
        respelled = _respelled(code, spell)
        assert _codes(respelled) == expected, f"{name}:\n{respelled}"


@pytest.mark.parametrize(
    ("text", "value"),
    [("7", 7), ("0x1f", 31), ("0o17", 15), ("0b101", 5), ("1_000", 1000), ("-0b1", -1), ("--2", 2), ("+3", 3)],
)
def test_integer_value_reads_every_base(text: str, value: int) -> None:
    assert integer_value(cst.parse_expression(text)) == value


def test_integer_value_refuses_what_it_cannot_read_cheaply() -> None:
    huge = cst.parse_expression("9" * (MAX_INTEGER_CHARS + 1))
    assert integer_value(huge) is None
    assert number_value(huge) == float("inf")
    assert number_value(cst.parse_expression("1" + "0" * 310)) == float("inf")  # past a float's range
    assert number_value(cst.parse_expression("1e999")) == float("inf")
    assert integer_value(cst.parse_expression("10000000000000000000"), bound=64) is None
    assert integer_value(cst.parse_expression("x")) is None


@pytest.mark.parametrize(("value", "whole"), [(2.0, 2), (-1.0, -1), (2.5, None), (float("inf"), None),
                                              (float("nan"), None), (None, None)])
def test_whole_number_is_finite_and_integral(value: float | None, whole: int | None) -> None:
    assert whole_number(value) == whole


@pytest.mark.parametrize(
    "text",
    [
        "def f(s):\n    return s.softmax(" + "9" * 4301 + ")\n",
        "def f(s):\n    return s.softmax(1" + "0" * 400 + ")\n",
        "out = out.transpose(1, 10000000000000000000).view(b, d)\n",
        "def f(s, T):\n    m = torch.full((T, T), float('-inf')).triu(diagonal=float('inf'))\n    return s + m\n",
        "def f(x):\n    return x.size(1e999 - 1e999)\n",
        "def f(x):\n    return x.shape[-1" + "0" * 400 + "]\n",
    ],
    ids=["4301 digits", "beyond float", "20-digit dim", "infinite diagonal", "nan dim", "huge index"],
)
def test_extreme_literals_are_linted(text: str) -> None:
    lint_text(text)


def test_an_infinite_softmax_dim_is_no_dim() -> None:
    """``number`` can be ``inf`` (``1e999``, a literal of 400 digits): the softmax rule reads its
    axis through ``whole_number``, as the other analyses do."""
    lint_text("def f(s):\n    return s.softmax(1e999)\n")
    lint_text("def f(s):\n    return s.softmax(-1" + "0" * 400 + ")\n")
