"""Everything one run writes into ``--out``: the CSV, the feedback, Gradescope results, the HTML."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from attncheck.grade import csv_export, feedback, gradescope, html_report
from attncheck.grade.assignment import Assignment
from attncheck.grade.record import Grade

CSV = "gradebook.csv"
FEEDBACK = "feedback"
GRADESCOPE = "gradescope"
RESULTS = "results.json"
HTML = "report.html"


def write_all(out: Path, grades: Sequence[Grade], assignment: Assignment, seed: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    groups = assignment.rubric.columns
    csv_export.write(out / CSV, grades, groups)
    (out / FEEDBACK).mkdir(exist_ok=True)
    for grade in grades:
        (out / FEEDBACK / f"{_file_name(grade.student)}.md").write_text(
            feedback.feedback(grade, assignment), encoding="utf-8")
        folder = out / GRADESCOPE / _file_name(grade.student)
        folder.mkdir(parents=True, exist_ok=True)
        document = gradescope.results(grade, assignment)
        (folder / RESULTS).write_text(json.dumps(document, indent=1), encoding="utf-8")
    page = html_report.render(grades, groups, f"attncheck grade: {assignment.name}", assignment.asked_for(), seed)
    (out / HTML).write_text(page, encoding="utf-8")


def _file_name(student: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in student).strip(".") or "student"
