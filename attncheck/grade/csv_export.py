"""``gradebook.csv``: one row per student: score, max, status, and one column per rubric group."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from attncheck.grade.record import Grade

FIXED = ("student", "score", "max", "status", "target", "mistakes", "problem")


def columns(groups: Sequence[str]) -> list[str]:
    return [*FIXED, *groups]


def write(path: Path, grades: Sequence[Grade], groups: Sequence[str]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle)
        out.writerow(columns(groups))
        for grade in grades:
            earned = {g["group"]: g["score"] for g in grade.groups}
            out.writerow([grade.student, f"{grade.score:g}", f"{grade.maximum:g}", grade.status, grade.target,
                          grade.codes(), grade.problem, *(f"{earned.get(g, 0):g}" for g in groups)])
