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
MAX_NAME_BYTES = 200


def write_all(out: Path, grades: Sequence[Grade], assignment: Assignment, seed: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    groups = assignment.rubric.columns
    csv_export.write(out / CSV, grades, groups)
    (out / FEEDBACK).mkdir(exist_ok=True)
    for grade, name in zip(grades, file_names(grades), strict=True):
        (out / FEEDBACK / f"{name}.md").write_text(feedback.feedback(grade, assignment), encoding="utf-8")
        folder = out / GRADESCOPE / name
        folder.mkdir(parents=True, exist_ok=True)
        document = gradescope.results(grade, assignment)
        (folder / RESULTS).write_text(json.dumps(document, indent=1), encoding="utf-8")
    page = html_report.render(grades, groups, f"attncheck grade: {assignment.name}", assignment.asked_for(), seed)
    (out / HTML).write_text(page, encoding="utf-8")


def file_names(grades: Sequence[Grade]) -> list[str]:
    """Each student's feedback and Gradescope file name: its name's letters and digits, at most
    ``MAX_NAME_BYTES`` of UTF-8, and ``-2``, ``-3``... after a name taken already. A name that
    became another's ("a b" and "a_b") overwrote its feedback; 100 CJK letters (300 bytes) are
    over the 255 a file name may have, and ended the run's outputs there."""
    taken: set[str] = set()
    names = []
    for grade in grades:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in grade.student).strip(".") or "student"
        safe = safe.encode("utf-8")[:MAX_NAME_BYTES].decode("utf-8", errors="ignore")
        name, count = safe, 1
        while name.lower() in taken:  # also where file names ignore case
            count += 1
            name = f"{safe}-{count}"
        taken.add(name.lower())
        names.append(name)
    return names
