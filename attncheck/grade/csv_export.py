"""``gradebook.csv``: one row per student: score, max, status, and one column per rubric group.

The csv module quotes newlines and commas; a text a student chose (its name, its files' names)
is also kept from running as a spreadsheet formula.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from attncheck.grade.record import Grade

FIXED = ("student", "score", "max", "status", "target", "mistakes", "problem")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what spreadsheets read as the start of a formula


def columns(groups: Sequence[str]) -> list[str]:
    return [*FIXED, *groups]


def write(path: Path, grades: Sequence[Grade], groups: Sequence[str]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle)
        out.writerow(columns(groups))
        for grade in grades:
            earned = {g["group"]: g["score"] for g in grade.groups}
            texts = [inert(text) for text in (grade.student, grade.status, grade.target, grade.codes(), grade.problem)]
            out.writerow([texts[0], f"{grade.score:g}", f"{grade.maximum:g}", *texts[1:],
                          *(f"{earned.get(g, 0):g}" for g in groups)])


def inert(text: str) -> str:
    """``text`` as a spreadsheet shows it: a student's name or a file name that starts like a
    formula (``=HYPERLINK(...)``, ``+``, ``-``, ``@``) gets a leading ``'``, so it is not run."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text
