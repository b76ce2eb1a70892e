"""``--fix`` checks what it wrote again, and offers no fix that keeps another rule's mistake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_cli import invoke, subprocess_run

MODEL = """import torch


def attend(q, k, v):
    scores = q @ k.transpose(-2, -1) / torch.sqrt(64)
    return torch.softmax(scores, dim=-1) @ v


def unscaled(q, k, v):
    scores = q @ k.transpose(-2, -1)
    return torch.softmax(scores, dim=-1) @ v


def by_length(q, k, v):
    S = q.shape[1]
    scores = q @ k.transpose(-2, -1) / torch.sqrt(S)
    return torch.softmax(scores, dim=-1) @ v
"""


def reported(result) -> list[tuple[str, int, bool]]:
    return [(f["code"], f["line"], f["fixable"]) for f in json.loads(result.stdout)["findings"]]


def test_the_sequence_length_scale_gets_no_sqrt_fix(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    before = reported(invoke("--no-cache", "--format", "json", "model.py", cwd=tmp_path))
    assert ("ATT204", 5, True) in before  # torch.sqrt(64): math.sqrt(64) is the right scale
    assert ("ATT201", 16, False) in before and ("ATT204", 16, False) in before  # sqrt(S): no fix keeps S


def test_fix_reports_the_remaining_findings_where_they_now_are(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    result = invoke("--no-cache", "--format", "json", "--fix", "model.py", cwd=tmp_path)
    written = (tmp_path / "model.py").read_text()
    assert written.splitlines()[:2] == ["import torch", "import math"]
    assert "math.sqrt(64)" in written and "torch.sqrt(S)" in written
    lines = written.splitlines()
    remaining = reported(result)
    assert remaining == [("ATT201", 11, False), ("ATT201", 17, False), ("ATT204", 17, False)]
    assert lines[10].strip() == "scores = q @ k.transpose(-2, -1)"  # line 11 of the file as written
    assert "1 fixed, 3 remaining" in result.stderr


CRASHING_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "buggy" / "sqrt_of_dimension.py"


@pytest.mark.sandbox
def test_fix_runs_the_dynamic_check_again_on_what_it_wrote(tmp_path):
    (tmp_path / "model.py").write_text(CRASHING_FIXTURE.read_text())
    before = _dynamic_json(tmp_path)
    assert [t["status"] for t in before["targets"]] == ["failed"]  # every forward raises in torch.sqrt
    assert [(f["code"], f["source"]) for f in before["findings"]] == [("ATT204", "both")]

    after = _dynamic_json(tmp_path, "--fix")
    assert "math.sqrt(self.d_k)" in (tmp_path / "model.py").read_text()
    assert [t["status"] for t in after["targets"]] == ["passed"]  # judged as written, not as it was
    assert after["findings"] == []


def _dynamic_json(folder, *args: str) -> dict:
    ran = subprocess_run("-m", "attncheck", "--no-cache", "--format", "json", "--device", "cpu", *args, "model.py",
                         cwd=folder)
    assert "Traceback" not in ran.stderr, ran.stderr
    return json.loads(ran.stdout)
