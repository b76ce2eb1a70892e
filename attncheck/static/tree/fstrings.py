"""Split an f-string token into its literal text and replacement fields, as Python 3.11 does.

Python 3.11's ``ast`` places an expression inside an f-string by searching the token
for the expression's text: the first occurrence wins (``f"{a} {a}"`` puts both at the
first ``a``), and an expression in parentheses or over several lines lands elsewhere.
The fast tree needs true positions, so it finds each expression's text itself with
this scan, a transcription of CPython's own split (``fstring_find_literal`` and
``fstring_find_expr`` in Parser/string_parser.c), and parses each on its own.

The parts are libcst's: literal text stays as written (``{{`` and escapes included),
and a field knows its ``=``, its conversion and its format spec, itself parts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PREFIX = re.compile(r"[A-Za-z]*")
_SPACE = " \t\n\r\x0b\x0c"  # what Py_ISSPACE skips after a field's "="
_OPENING = "([{"
_CLOSING = ")]}"


@dataclass(frozen=True)
class Text:
    """Literal text ``token[start:end]``, as written."""

    start: int
    end: int


@dataclass(frozen=True)
class Field:
    """A replacement field whose expression is the text ``token[start:end]``."""

    start: int
    end: int
    equal: bool  # ``{x=}``
    conversion: str | None  # ``{x!r}``
    spec: list[Text | Field] | None  # ``{x:>{width}}``


def parts(token: str) -> list[Text | Field]:
    """The parts of ``token``, one f-string literal with its prefix and quotes.

    Raises ValueError on a token that is not a well-formed f-string (``ast`` has
    accepted it before this is called, so that means the scan is wrong)."""
    prefix, quote = delimiters(token)
    scan = _Scan(token, len(prefix) + len(quote), len(token) - len(quote), raw="r" in prefix.lower())
    found = scan.parts(nested=False)
    if scan.position != scan.stop:
        raise ValueError("a single '}' in an f-string")
    return found


def delimiters(token: str) -> tuple[str, str]:
    """A string literal's prefix (``rf``, or "") and its quote: ``'``, ``"``, or three of either."""
    prefix = _PREFIX.match(token).group(0)  # type: ignore[union-attr]
    quote = token[len(prefix) : len(prefix) + 3]
    return prefix, quote if quote in ('"""', "'''") else quote[:1]


class _Scan:
    def __init__(self, token: str, start: int, stop: int, *, raw: bool) -> None:
        self.token = token
        self.position = start
        self.stop = stop
        self.raw = raw

    def parts(self, *, nested: bool) -> list[Text | Field]:
        """Literal text and fields up to the end of the token or, in a format spec
        (``nested``), up to the ``}`` that closes it."""
        found: list[Text | Field] = []
        while self.position < self.stop:
            start = self.position
            self._literal(nested=nested)
            if self.position > start:
                found.append(Text(start, self.position))
            if self.position >= self.stop or self.token[self.position] == "}":
                break
            found.append(self._field())
        return found

    def _literal(self, *, nested: bool) -> None:
        """Move past literal text, to the next field's ``{`` or the ``}`` that ends it.
        Outside a format spec a doubled brace is text."""
        token, stop = self.token, self.stop
        while self.position < stop:
            character = token[self.position]
            if character == "\\" and not self.raw and self.position + 1 < stop:
                self.position += 1
                character = token[self.position]
                if character == "N" and token.startswith("{", self.position + 1):  # \N{NAME}, no field
                    closing = token.find("}", self.position + 2, stop)
                    self.position = closing + 1 if closing >= 0 else stop
                    continue
            if character in "{}":
                if not nested and token.startswith(character, self.position + 1):
                    self.position += 2
                    continue
                return
            self.position += 1

    def _field(self) -> Field:
        """A field, from its ``{`` through its ``}``."""
        token = self.token
        start = self.position + 1
        end = self._expression_end(start)
        self.position = end
        equal = token.startswith("=", end)
        if equal:
            self.position += 1
            while self.position < self.stop and token[self.position] in _SPACE:
                self.position += 1
        conversion = None
        if token.startswith("!", self.position):
            conversion = token[self.position + 1 : self.position + 2]
            self.position += 2
        spec = None
        if token.startswith(":", self.position):
            self.position += 1
            spec = self.parts(nested=True)
        if not token.startswith("}", self.position):
            raise ValueError("an f-string field without its '}'")
        self.position += 1
        if not token[start:end].strip():
            raise ValueError("an empty f-string expression")
        return Field(start, end, equal, conversion, spec)

    def _expression_end(self, position: int) -> int:
        """Where the expression starting at ``position`` ends: at the first ``!``, ``:``,
        ``=`` or ``}`` outside brackets and strings that is not part of ``!=``, ``==``,
        ``<=`` or ``>=``."""
        token, stop = self.token, self.stop
        depth = 0
        quote = ""
        while position < stop:
            character = token[position]
            if quote:
                if token.startswith(quote, position):
                    position += len(quote)
                    quote = ""
                else:
                    position += 1
                continue
            if character in "'\"":
                quote = character * 3 if token.startswith(character * 3, position) else character
                position += len(quote)
                continue
            if character in _OPENING:
                depth += 1
            elif character in _CLOSING and (depth or character != "}"):
                depth -= 1
            elif depth == 0 and character in "!:=}<>":
                if token.startswith("=", position + 1) and character in "!=<>":
                    position += 2
                    continue
                if character not in "<>":
                    return position
            position += 1
        raise ValueError("an f-string expression that does not end")
