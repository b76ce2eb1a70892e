"""Whether a file's text could give a finding or a target at all, before anything parses it.

Most files of a repository hold no attention (data loading, training loops, utilities);
for them the static pass need not import libcst and its rules (most of a short run's
time, as ``bench/precommit.py`` shows). A file is passed over when its text holds none
of the words any rule needs (each rule's ``PREFILTER``: a rule never runs on a text
without one of its words) and none of the words a target needs (``TARGET_WORDS``: an
attention class or function computes a softmax or calls scaled-dot-product attention,
or is named as attention or rotary).

The rules' words are read from the rules' source files, not imported (that import is
what this module saves); a rule file whose ``PREFILTER`` cannot be read that way turns
the prefilter off, and ``tests/test_prefilter.py`` checks the words read equal the
words of the imported rules.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from attncheck.plain_search import holds_any

# Names an attention target's text must hold (``static/targets.py``), case-insensitively.
_TARGET_NAMES = ("attention", "attn", "softmax", "scaled_dot_product", "mha", "multihead", "rotary", "rope")
TARGET_WORDS = re.compile("|".join(_TARGET_NAMES), re.IGNORECASE)
_RULE_CLASS = re.compile(r"^\s+code\s*=\s*[\"']ATT\d+[\"']", re.MULTILINE)
_PREFILTER = re.compile(r"^\s+PREFILTER\s*=\s*(\([^)]*\))", re.MULTILINE)
RULES_DIR = Path(__file__).parent / "static" / "rules"


def could_have_findings(text: str) -> bool:
    """False only when no rule could run on ``text`` and no target could be found in it."""
    if holds_any(text, _TARGET_NAMES, TARGET_WORDS):
        return True
    words = rule_words()
    return words is None or any(word in text for word in words)


@cache
def rule_words() -> frozenset[str] | None:
    """Every word of every rule's ``PREFILTER``, or None when a rule's cannot be read."""
    words: set[str] = set()
    for path in sorted(RULES_DIR.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        rules, prefilters = _RULE_CLASS.findall(text), _PREFILTER.findall(text)
        if len(prefilters) != len(rules):
            return None
        for literal in prefilters:
            try:
                value = ast.literal_eval(literal)
            except (ValueError, SyntaxError):
                return None
            words.update((value,) if isinstance(value, str) else value)
    return frozenset(words) if words else None
