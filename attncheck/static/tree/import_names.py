"""The names a block of module-level imports binds, read without a parse when it can be.

``regions`` drops the imports of a large file that the kept code never names, so it
asks this for every top-level statement holding the word ``import`` (a few dozen
per model file). Almost all of them are one plain ``import a.b as c`` or
``from .x import (a, b as c)``: a regular expression reads those; anything else
(a ``try``/``if`` block, ``;``, a backslash, a comment inside the brackets, a star
import) goes through ``ast``, which says exactly what is bound or that the block is
more than imports.
"""

from __future__ import annotations

import ast
import keyword
import re
import textwrap
from functools import lru_cache

_IDENTIFIER = r"(?!\d)\w+"
_DOTTED = rf"{_IDENTIFIER}(?:\.{_IDENTIFIER})*"
# Blank lines and comment lines a statement carries until the next one.
_TRAILER = r"[ \t]*(?:#[^\n]*)?(?:\n[ \t]*(?:#[^\n]*)?)*"
_PLAIN = re.compile(
    rf"(?:import[ \t]+(?P<modules>[^\n#;\\()*]+)"
    rf"|from[ \t]+(?:\.+|\.*{_DOTTED})[ \t]+import[ \t]*"
    rf"(?:\((?P<parenthesised>[^()#;\\*]*)\)|(?P<names>[ \t][^\n#;\\()*]*)))"
    rf"{_TRAILER}"
)
_MODULE = re.compile(rf"(?P<name>{_DOTTED})(?:\s+as\s+(?P<alias>{_IDENTIFIER}))?")
_NAME = re.compile(rf"(?P<name>{_IDENTIFIER})(?:\s+as\s+(?P<alias>{_IDENTIFIER}))?")


@lru_cache(maxsize=2048)
def bound_names(block: str) -> frozenset[str] | None:
    """The names a block of plain imports binds; None (keep it) for a star import or a
    block that is more than imports (``try: import flash_attn`` ...). Cached by the
    block's text: the files of one library repeat the same import lines."""
    plain = _PLAIN.fullmatch(block)
    names = _plain_bound_names(plain) if plain is not None else None
    if names is None:
        names = _parsed_bound_names(block)
    return frozenset(names) if names is not None else None


def _plain_bound_names(plain: re.Match[str]) -> set[str] | None:
    """The names a one-statement import binds, or None when its list is not plain."""
    if plain.group("modules") is not None:
        entries, pattern = plain.group("modules").split(","), _MODULE
    else:
        listed = plain.group("parenthesised")
        entries, pattern = (listed if listed is not None else plain.group("names")).split(","), _NAME
        if listed is not None and len(entries) > 1 and not entries[-1].strip():
            entries.pop()  # ``from x import (a, b,)``
    names: set[str] = set()
    for entry in entries:
        match = pattern.fullmatch(entry.strip())
        if match is None:
            return None
        name, alias = match.group("name"), match.group("alias")
        if not all(_is_name(part) for part in (*name.split("."), *([alias] if alias else []))):
            return None
        names.add(alias or name.split(".")[0])
    return names


def _is_name(word: str) -> bool:
    return word.isidentifier() and not keyword.iskeyword(word)


def _parsed_bound_names(block: str) -> set[str] | None:
    try:
        tree = ast.parse(textwrap.dedent(block))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    names: set[str] = set()
    for statement in tree.body:
        if not isinstance(statement, (ast.Import, ast.ImportFrom)):
            return None
        for alias in statement.names:
            if alias.name == "*":
                return None
            names.add(alias.asname or alias.name.split(".")[0])
    return names
