"""Sizes drawn per grading run: reproducible from the seed, recorded, never ``attncheck FILE``'s own,
and a submission built around the checker's sizes fails on a drawn one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from attncheck.dynamic.probes import sizes
from attncheck.grade import assignment, record, schedule, submissions
from attncheck.grade.record import GRADED

GRADING = Path(__file__).resolve().parents[2] / "fixtures" / "grading"


def test_a_seed_draws_the_same_sizes_every_time_and_never_the_checkers_own():
    draws = [sizes.drawn(seed) for seed in range(200)]
    assert draws == [sizes.drawn(seed) for seed in range(200)]
    assert len(set(draws)) > 4  # the seed moves the sizes, not only the inputs
    for drawn in draws:
        assert drawn.batch != sizes.DEFAULT.batch and drawn.batch >= 2
        assert drawn.seq_self != sizes.DEFAULT.seq_self and drawn.seq_self > sizes.FUTURE_FROM + 1
        assert drawn.seq_k != sizes.DEFAULT.seq_k and drawn.seq_k >= 5
        assert sizes.QUERY_PROBE < drawn.seq_q != drawn.seq_k
        assert drawn.lengths(True) == (drawn.seq_self, drawn.seq_self)
        assert drawn.lengths(False) == (drawn.seq_q, drawn.seq_k)


@pytest.mark.sandbox
@pytest.mark.slow
def test_a_submission_hard_coding_the_checkers_sizes_passes_at_them_and_fails_on_a_draw(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    root = tmp_path / "class"
    shutil.copytree(GRADING / "hardcoded_sizes", root / "hardcoded")
    shutil.copytree(GRADING / "class" / "s01", root / "textbook")
    task = assignment.load(None)

    def graded(out: str, seed: int) -> dict[str, record.Grade]:
        plan = schedule.Plan(submissions.find(root), task, tmp_path / out, seed=seed)
        return {g.student: g for g in schedule.run(plan)}

    seed = 11
    drawn = graded("drawn", seed)
    assert drawn["hardcoded"].sizes == sizes.drawn(seed).to_dict() == drawn["textbook"].sizes
    assert drawn["textbook"].status == GRADED and drawn["textbook"].score == drawn["textbook"].maximum
    hardcoded = drawn["hardcoded"]
    assert hardcoded.status == GRADED and hardcoded.score < hardcoded.maximum / 2
    shape = next(g for g in hardcoded.groups if g["group"] == "shape")
    assert ("forward", "failed") in [tuple(c[:2]) for c in shape["checks"]]

    monkeypatch.setattr(record, "drawn", lambda _seed: sizes.DEFAULT)  # what `attncheck FILE` plans with
    fixed = graded("fixed", seed)["hardcoded"]
    assert fixed.sizes == sizes.DEFAULT.to_dict()
    assert fixed.score == fixed.maximum, [g for g in fixed.groups if g["score"] < g["maximum"]]
