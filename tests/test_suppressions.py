"""Suppression comments: bare ``# noqa``, other tools' noqa codes, and unknown codes warned about."""

from __future__ import annotations

from tests.test_cli import invoke

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
