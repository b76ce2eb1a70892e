"""Every public code has a name, a severity and a doc that tells the whole story."""

from __future__ import annotations

import pytest

from attncheck.catalogue import CODES, doc, lookup, matches

SECTIONS = ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix", "## Dynamic signature")


@pytest.mark.parametrize("code", list(CODES))
def test_every_code_has_a_complete_doc(code):
    text = doc(code)
    assert text is not None, f"rules/{code}.md is missing"
    assert text.startswith(f"# {code} {CODES[code].name}\n")
    positions = [text.find(section) for section in SECTIONS]
    assert -1 not in positions, [s for s, p in zip(SECTIONS, positions, strict=True) if p == -1]
    assert positions == sorted(positions), "sections out of order"
    assert text.count("```python") >= 2, "a bad and a good example"


def test_lookup_by_code_or_name():
    assert lookup("att201") is CODES["ATT201"]
    assert lookup("wrong-scale") is CODES["ATT201"]
    assert lookup("nothing") is None


def test_selectors_are_codes_or_prefixes():
    assert matches("ATT201", ["ATT2"]) and matches("ATT201", ["ALL"]) and matches("ATT201", ["att201"])
    assert not matches("ATT201", ["ATT3", "ATT29"])
