"""ATT101-ATT103 on the cases that matter: the layers the projection messages name, and the
severity of a redundant dropout."""

from __future__ import annotations

from pathlib import Path

from attncheck.findings import Finding, Severity
from tests.conftest import lint_text

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def findings_of(relative: str) -> list[Finding]:
    """The static findings of one fixture, named by its path under fixtures/."""
    return lint_text((FIXTURES / relative).read_text(encoding="utf-8"), path=relative)


def by_code(findings: list[Finding], code: str) -> list[Finding]:
    return [f for f in findings if f.code == code]


def test_seed003_projection_message_names_the_unused_layers():
    (missing,) = by_code(findings_of("seeds/seed003_review.py"), "ATT101")
    assert "self.query, self.key, self.value" in missing.message
    (output,) = by_code(findings_of("seeds/seed003_review.py"), "ATT102")
    assert "self.proj" in output.message


def test_redundant_dropout_beside_an_applied_one_is_a_warning():
    (finding,) = by_code(findings_of("seeds/seed000_mha.py"), "ATT103")
    assert finding.severity == Severity.WARNING
