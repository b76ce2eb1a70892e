"""Every fixture, linted: the findings at warning or above must equal its ``# expect:`` markers.

Markers for codes whose rule does not exist yet (another helper's) are skipped
until that rule lands, so the harness demands them automatically from then on.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attncheck.findings import Severity
from attncheck.sources import Source
from attncheck.static.engine import lint
from attncheck.static.rules import all_rules

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
_EXPECT = re.compile(r"#\s*expect:\s*(ATT\d{3}(?:\s*,\s*ATT\d{3})*)")
_DYNAMIC = re.compile(r"^#\s*dynamic:\s*(none|ATT\d{3}(?:\s*,\s*ATT\d{3})*)\s*$", re.M)
FILES = sorted(p for folder in ("correct", "buggy", "seeds") for p in (FIXTURES / folder).glob("*.py"))


def expected(text: str) -> set[tuple[int, str]]:
    """The (line, code) pairs a fixture's ``# expect:`` markers demand."""
    found = set()
    for number, line in enumerate(text.splitlines(), start=1):
        for match in _EXPECT.finditer(line):
            found |= {(number, code.strip()) for code in match.group(1).split(",")}
    return found


def test_expect_markers_are_parsed():
    text = "a = 1\nb = 2  # expect: ATT201, ATT301\nc = 3  # expect: ATT101\n"
    assert expected(text) == {(2, "ATT201"), (2, "ATT301"), (3, "ATT101")}


def test_there_are_fixtures_in_every_folder():
    for folder in ("correct", "buggy", "seeds"):
        assert list((FIXTURES / folder).glob("*.py")), folder


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_findings_match_markers(path: Path):
    text = path.read_text(encoding="utf-8")
    result = lint(Source(str(path), text), all_rules())
    assert result.error is None, result.error
    known = {rule.code for rule in all_rules()}
    want = {(line, code) for line, code in expected(text) if code in known}
    got = {(f.line, f.code) for f in result.findings if f.severity >= Severity.WARNING}
    if path.parent.name == "correct":
        assert not expected(text), "correct fixtures carry no markers"
    details = {(f.line, f.code): f.message for f in result.findings}
    assert got == want, {"unexpected": {k: details[k] for k in got - want}, "missing": sorted(want - got)}


@pytest.mark.parametrize(
    "path", [p for p in FILES if p.parent.name != "correct"], ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_buggy_fixture_declares_its_dynamic_codes(path: Path):
    assert _DYNAMIC.search(path.read_text(encoding="utf-8")), "add a '# dynamic: CODES' (or none) header line"
