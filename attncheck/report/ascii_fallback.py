"""ASCII spellings for the characters a report stream cannot encode.

Messages say ``q·kᵀ`` and ``-θ``; a Windows pipe (cp1252) or an ASCII terminal
cannot encode some of them. Rather than crash with UnicodeEncodeError, the
streams attncheck writes to spell each such character in ASCII (``ᵀ`` -> ``^T``),
and any other character (a user's comment in a code frame) by its decomposed
ASCII letters or ``?``. Characters the stream can encode are left as they are.
"""

from __future__ import annotations

import codecs
import io
import unicodedata
from typing import TextIO

HANDLER = "attncheck-ascii"
SPELLINGS = {
    "·": ".", "ᵀ": "^T", "…": "...", "θ": "theta", "×": "x", "→": "->", "←": "<-",
    "≤": "<=", "≥": ">=", "≠": "!=", "√": "sqrt", "−": "-", "–": "-", "—": "--",
    "‘": "'", "’": "'", "“": '"', "”": '"', "²": "^2", "½": "1/2", "∞": "inf",
}


def spell(character: str) -> str:
    """The ASCII spelling of one character."""
    known = SPELLINGS.get(character)
    if known is not None:
        return known
    decomposed = unicodedata.normalize("NFKD", character).encode("ascii", "ignore").decode("ascii")
    return decomposed or "?"


def _replace(error: UnicodeError) -> tuple[str | bytes, int]:
    """The codec error handler. Lone surrogates from undecodable file names go out as their
    original bytes, as ``surrogateescape`` would write them."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    bad = error.object[error.start:error.end]
    if all("\udc80" <= c <= "\udcff" for c in bad):
        return bytes(ord(c) - 0xDC00 for c in bad), error.end
    return "".join(spell(c) for c in bad), error.end


codecs.register_error(HANDLER, _replace)


def protect(stream: TextIO) -> None:
    """Make ``stream`` spell what its encoding lacks in ASCII, where the stream allows it."""
    if isinstance(stream, io.TextIOWrapper) and stream.errors in ("strict", "surrogateescape", "replace"):
        stream.reconfigure(errors=HANDLER)
