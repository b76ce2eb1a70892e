"""Suppression comments: bare ``# noqa``, other tools' noqa codes, and unknown codes warned about."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attncheck.findings import Finding, Severity
from attncheck.sources import Source
from attncheck.suppressions import unsuppressed
from tests.test_cli import invoke, subprocess_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

MODEL = """import torch

def a(q, k):
    return q @ k / torch.sqrt(64)  # noqa

def b(q, k):
    return q @ k / torch.sqrt(64)  # noqa: E501

def c(q, k):
    return q @ k / torch.sqrt(64)  # attncheck: ignore[ATT999]

def d(q, k):
    return q @ k / torch.sqrt(64)  # noqa: ATT204
"""


def test_bare_noqa_hides_everything_and_foreign_codes_hide_nothing(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    result = invoke("--no-cache", "--output-format", "concise", "model.py", cwd=tmp_path)
    lines = [line for line in result.stdout.splitlines() if "ATT204" in line]
    assert [line.split(":")[1] for line in lines] == ["7", "10"]


def test_an_unknown_code_in_a_suppression_is_a_warning(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    result = invoke("--no-cache", "model.py", cwd=tmp_path)
    assert "model.py:10: warning: unknown code 'ATT999' in a suppression comment" in result.stderr
    assert result.stderr.count("unknown code") == 1


REQUIRED_MASK_A = FIXTURES / "suppressed" / "required_mask_a.py"


@pytest.mark.sandbox
def test_a_suppression_hides_the_dynamic_finding_at_its_line_too(tmp_path):
    """The user's ``# noqa: ATT204`` on the line that raises hides the crash the dynamic check names
    there; the target still says it failed, since a forward that raises was not checked."""
    ran = subprocess_run("-m", "attncheck", "--no-cache", "--format", "json", "--device", "cpu",
                         str(REQUIRED_MASK_A), cwd=tmp_path)
    report = json.loads(ran.stdout)
    assert ran.returncode == 0, ran.stdout
    assert report["findings"] == []
    [target] = report["targets"]
    assert target["status"] == "failed" and "line 17" in target["reason"]


def test_a_dynamic_finding_is_located_where_a_comment_can_hide_it():
    source = Source("model.py", REQUIRED_MASK_A.read_text())
    at_raise = Finding("ATT204", Severity.ERROR, "raised", "model.py", source.locate(17), source="dynamic")
    at_class = Finding("ATT204", Severity.ERROR, "raised", "model.py", source.locate(6), source="dynamic")
    assert unsuppressed([at_raise, at_class], source) == [at_class]
