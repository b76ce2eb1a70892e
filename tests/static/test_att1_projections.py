"""ATT101-ATT103 on the cases that matter: the layers the projection messages name, and the
severity of a redundant dropout."""

from __future__ import annotations

from pathlib import Path

from attncheck.findings import Finding
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


def test_a_dead_dropout_beside_a_core_that_drops_out_is_no_att103():
    """Seed 000's MHA calls its own ``ScaledDotProductAttention``, which applies the attention
    dropout; the MHA's unused ``self.dropout`` is dead code, not a missing attention dropout
    (issue 20, item 7)."""
    assert by_code(findings_of("seeds/seed000_mha.py"), "ATT103") == []
