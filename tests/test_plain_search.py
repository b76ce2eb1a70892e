"""Plain searches answer what a case-insensitive expression of the same words would."""

from __future__ import annotations

import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attncheck.plain_search import holds_any
from attncheck.prefilter import _TARGET_NAMES, TARGET_WORDS
from attncheck.static.analysis import rope

# Every (words, expression) pair the code searches with.
SEARCHES = [(_TARGET_NAMES, TARGET_WORDS), (("cos",), rope._COS), (("sin",), rope._SIN)]
_LETTERS = "".join(sorted({c for words, _ in SEARCHES for word in words for c in word}))


@pytest.mark.parametrize(("words", "pattern"), SEARCHES)
def test_the_words_are_the_expression(words, pattern):
    assert pattern.flags & re.IGNORECASE and pattern.pattern == "|".join(words)
    assert all(word == word.lower() and "k" not in word and not word.endswith("i") for word in words)


def test_lowering_makes_an_ascii_letter_of_two_characters_only():
    """What ``holds_any``'s argument rests on, for this Python's Unicode tables."""
    made = {c for c in map(chr, range(128, sys.maxunicode + 1)) if any(ord(x) < 128 for x in c.lower())}
    assert made == {"\u0130", "\u212a"}


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(SEARCHES),
       st.text(alphabet=st.sampled_from(_LETTERS + _LETTERS.upper() + " .\nſİKÅé×—"), max_size=60))
def test_holds_any_agrees_with_the_expression(search, text):
    words, pattern = search
    assert holds_any(text, words, pattern) == (pattern.search(text) is not None)


@pytest.mark.parametrize("text", ["class RoPE:", "x = MultiHead()", "ſoftmax(x)", "İ attn", "COS", "coſ", "y = 1"])
def test_holds_any_on_spellings_a_file_holds(text):
    for words, pattern in SEARCHES:
        assert holds_any(text, words, pattern) == (pattern.search(text) is not None)
