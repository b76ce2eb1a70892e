"""What a comment or docstring says about a mask's values: which of them are blocked.

One reader for both passes: the static rule ATT304 compares it with what the code blocks, and the
dynamic binding gives a required mask in the stated convention first and judges the module by it.
Plain text in, no libcst and no torch: English and Chinese wordings ("True/1 means masked",
"1 for tokens to attend, 0 for padding", "mask 中 True/1 表示需要屏蔽的位置").
"""

from __future__ import annotations

import re
from typing import Literal

Polarity = Literal["ones", "zeros"]  # the mask values that are blocked

# Phrases whose meaning is "this position is removed" or "this position is kept".
# Negated phrases come first: "not masked" is a keep, "cannot attend" a block.
_KEEP_NEGATED = r"not\s+(?:be\s+)?(?:masked|blocked|ignored)|unmasked"
_BLOCK_NEGATED = (
    r"(?:not|cannot|can't|never)\s+(?:be\s+)?(?:attend|attended|seen|visible|allowed)"
    r"|不可见|不关注|不参与|不能看到"
)
_BLOCK = (
    r"masked|mask(?:ed)?\s+out|to\s+mask|blocked|ignored?|padding|padded|\bpad\b|excluded?|disallowed|"
    r"屏蔽|遮挡|遮盖|掩盖|忽略|填充|被\s*mask"
)
_KEEP = r"\bkeep|kept|attend|visible|valid|allowed|real\s+tokens?|保留|可见|关注|有效|参与"
_MEANINGS = (
    (re.compile(_KEEP_NEGATED, re.IGNORECASE), "keep"),
    (re.compile(_BLOCK_NEGATED, re.IGNORECASE), "block"),
    (re.compile(_BLOCK, re.IGNORECASE), "block"),
    (re.compile(_KEEP, re.IGNORECASE), "keep"),
)
_ONES = re.compile(r"\bTrue\b|(?<![\w.\[-])1(?![\w.\]])|非零|non-?zero", re.IGNORECASE)
_ZEROS = re.compile(r"\bFalse\b|(?<![\w.\[-])0(?![\w.\]])|为零|\bzeros?\b", re.IGNORECASE)
# A 0 or 1 alone in a clause is alone in the text around the clause too, whose neighbours are
# a separator's (a "." of ". " may follow the digit: unlike in _ONES, it is allowed here).
_LONE_DIGIT = re.compile(r"(?<![\w.\[-])[01](?![\w\]])")
# "1 for real tokens and 0 for padding": "and"/"while"/"whereas" join two clauses as a comma would.
_CLAUSE = re.compile(r"[,;，；。\n]|\.\s|\s-\s|\s(?:and|while|whereas)\s")


def declared_blocked(text: str) -> Polarity | None:
    """Which mask values a comment or docstring says are blocked, if it says so clearly.

    ``"True/1 means masked"`` and ``"1 表示需要屏蔽"`` -> ones; ``"1 for tokens to
    attend, 0 for padding"`` -> zeros. Clauses that disagree make it None.
    """
    if not _may_name_values(text):
        return None  # most comments: no clause names the ones or the zeros
    return _clauses_verdict(text)


def _may_name_values(text: str) -> bool:
    """Whether a clause of ``text`` may match _ONES or _ZEROS: each of their matches holds a lone
    digit or one of these words, which casefolding spells as here whatever case IGNORECASE
    matched (the long s of "falſe" included). Cheaper than either regular expression."""
    folded = text.casefold()
    return (
        "true" in folded or "false" in folded or "zero" in folded or "零" in text
        or (("0" in text or "1" in text) and _LONE_DIGIT.search(text) is not None)
    )


def _clauses_verdict(text: str) -> Polarity | None:
    """``declared_blocked`` read clause by clause, with no quick rejection."""
    verdicts: set[Polarity] = set()
    for clause in _CLAUSE.split(text):
        ones, zeros = bool(_ONES.search(clause)), bool(_ZEROS.search(clause))
        if ones == zeros:
            continue
        meaning = None
        for pattern, kind in _MEANINGS:
            if pattern.search(clause):
                meaning = kind
                break
        if meaning is None:
            continue
        said_ones = ones
        verdicts.add("ones" if said_ones == (meaning == "block") else "zeros")
    return verdicts.pop() if len(verdicts) == 1 else None
