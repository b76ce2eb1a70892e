"""Every rule's own VALID and INVALID examples, run like Fixit runs them.

The examples are written against the rule alone and against all rules, so an
example can neither be silent for its own rule nor set off another one by
accident (a VALID example of one rule must be clean for every rule).
"""

from __future__ import annotations

import textwrap

import pytest

from attncheck.catalogue import CODES, doc
from attncheck.fixes import apply_edits
from attncheck.static.rules import all_rules
from tests.conftest import lint_text

RULES = all_rules()


def _examples(kind: str) -> list:
    return [
        pytest.param(rule, example, id=f"{rule.code}-{kind.lower()}-{index}")
        for rule in RULES
        for index, example in enumerate(getattr(rule, kind))
    ]


@pytest.mark.parametrize(("rule", "example"), _examples("VALID"))
def test_valid_example_is_clean_for_every_rule(rule, example):
    findings = lint_text(textwrap.dedent(example))
    assert [f for f in findings if f.severity > 0] == []


@pytest.mark.parametrize(("rule", "example"), _examples("INVALID"))
def test_invalid_example_is_flagged(rule, example):
    findings = [f for f in lint_text(textwrap.dedent(example.code), [rule]) if f.code == rule.code]
    assert findings, f"{rule.code} did not flag:\n{example.code}"
    first = findings[0]
    if example.line is not None:
        assert first.line == example.line
    if example.message is not None:
        assert example.message in first.message
    if example.severity is not None:
        assert first.severity == example.severity
    if example.fixed is not None:
        fixed, applied = apply_edits(textwrap.dedent(example.code), [edit for f in findings for edit in f.fix])
        assert applied, f"{rule.code} offered no fix for:\n{example.code}"
        assert fixed == textwrap.dedent(example.fixed)
        assert [f for f in lint_text(fixed, [rule]) if f.code == rule.code] == []


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_is_catalogued_documented_and_exemplified(rule):
    assert rule.code in CODES
    text = doc(rule.code)
    assert text is not None, f"rules/{rule.code}.md is missing"
    assert CODES[rule.code].name in text
    assert rule.VALID and rule.INVALID
