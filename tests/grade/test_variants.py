"""A GQA assignment's kv_heads reach the checker: the grouped submission gets full marks, the one that
tiles K/V heads (ATT401) and the one that ignores the K/V head count lose the variant group."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from attncheck.grade import assignment, schedule, submissions
from attncheck.grade.record import GRADED

pytest.importorskip("torch")
pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
GQA_ASSIGNMENT = """
[assignment]
name = "Homework 4: grouped-query attention"
variant = "gqa"
kv_heads = 2
[rubric.points]
variant = 20
"""


def test_a_gqa_assignment_passes_grouped_heads_and_fails_tiled_ones(tmp_path):
    root = tmp_path / "class"
    root.mkdir()
    for student, fixture in (("grouped", "correct/gqa_repeat_kv.py"), ("tiled", "buggy/gqa_tiled.py"),
                             ("mha", "grading/class/s01/attention.py")):
        shutil.copyfile(FIXTURES / fixture, root / f"{student}.py")
    (tmp_path / "gqa.toml").write_text(GQA_ASSIGNMENT)
    task = assignment.load(tmp_path / "gqa.toml")
    assert task.declaration() == {"kv_heads": 2}
    out = tmp_path / "out"
    grades = {g.student: g for g in schedule.run(schedule.Plan(submissions.find(root), task, out, seed=5))}

    def variant(student: str) -> dict:
        return next(g for g in grades[student].groups if g["group"] == "variant")

    grouped = grades["grouped"]
    assert grouped.status == GRADED and grouped.score == grouped.maximum, grouped.groups
    assert [tuple(c[:2]) for c in variant("grouped")["checks"]] == [("gqa-grouping", "passed")]
    tiled = grades["tiled"]
    assert tiled.status == GRADED and variant("tiled")["score"] == 0 and "ATT401" in tiled.codes()
    assert "query head h uses KV head h % 2" in variant("tiled")["checks"][0][2]
    mha = variant("mha")
    assert mha["score"] == 0 and "uses 4 K/V heads for 4 query heads; 2 are asked for" in mha["checks"][0][2]
