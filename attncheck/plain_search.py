"""Case-insensitive searches of whole texts for a few words, answered by plain searches.

Python's ``re`` has no fast scan for a case-insensitive expression: it tries the expression
at every character, about a tenth of a microsecond each, where ``str.find`` runs at memory
speed (a case-insensitive search for "cos" over a tree of model files took 0.17 s, a plain
one 0.01 s). Code spells most words in lower case, so plain searches answer most texts.
"""

from __future__ import annotations

import re


def holds_any(text: str, words: tuple[str, ...], pattern: re.Pattern[str]) -> bool:
    """``pattern.search(text) is not None``, where ``pattern`` is ``words`` (lower case)
    alternated with ``re.IGNORECASE``.

    The words are searched for as they are, then in the lowered text, which finds every match
    of an ASCII text. A word found so is a match in any text: lowering makes an ASCII letter of
    two non-ASCII characters only, ``k`` of the Kelvin sign and ``i`` of ``İ`` followed by a
    combining dot, so a word may not hold ``k`` nor end in ``i`` (``tests/test_plain_search.py``).
    Only a non-ASCII text with no word is asked of the expression, for its Unicode case
    folding (``ſ`` matches ``s``)."""
    if any(word in text for word in words):
        return True
    lowered = text.lower()
    if any(word in lowered for word in words):
        return True
    return not text.isascii() and pattern.search(text) is not None
