"""The opt-in per-rule timer: off by default, one JSON line per linted file when on."""

from __future__ import annotations

import json

from attncheck.sources import Source
from attncheck.static import rule_timing
from attncheck.static.engine import lint
from attncheck.static.rules import all_rules

SNIPPET = """\
import torch

def attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / 8
    return torch.softmax(scores, dim=-2) @ v
"""


def test_each_linted_file_appends_the_seconds_of_each_rule_that_ran(tmp_path, monkeypatch) -> None:
    times = tmp_path / "times.jsonl"
    monkeypatch.setenv(rule_timing.ENVIRONMENT_VARIABLE, str(times))
    rules = all_rules()
    lint(Source("a.py", SNIPPET), rules)
    lint(Source("b.py", SNIPPET), rules)
    lines = [json.loads(line) for line in times.read_text(encoding="utf-8").splitlines()]
    assert [line["path"] for line in lines] == ["a.py", "b.py"]
    seconds = lines[0]["seconds"]
    assert "ATT202" in seconds
    assert set(seconds) <= {rule.code for rule in rules}
    assert all(value >= 0.0 for value in seconds.values())


def test_timing_leaves_the_findings_unchanged(tmp_path, monkeypatch) -> None:
    untimed = lint(Source("a.py", SNIPPET), all_rules()).findings
    monkeypatch.setenv(rule_timing.ENVIRONMENT_VARIABLE, str(tmp_path / "times.jsonl"))
    assert lint(Source("a.py", SNIPPET), all_rules()).findings == untimed
    assert untimed


def test_without_the_variable_nothing_is_written(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(rule_timing.ENVIRONMENT_VARIABLE, raising=False)
    monkeypatch.chdir(tmp_path)
    lint(Source("a.py", SNIPPET), all_rules())
    assert rule_timing.destination() is None
    assert list(tmp_path.iterdir()) == []
