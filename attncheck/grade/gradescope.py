"""Gradescope's ``results.json`` for one submission, so ``attncheck grade`` can be the run script
of a Gradescope autograder (https://gradescope-autograders.readthedocs.io/en/latest/specs/).

One test per rubric group, with its score, max_score and the checks behind it as output; the
top-level output is the student's feedback. Every test is visible: the student sees what the
checker saw, never the reference solution.
"""

from __future__ import annotations

from typing import Any

from attncheck.grade.assignment import Assignment
from attncheck.grade.feedback import GROUP_WORDS, feedback
from attncheck.grade.record import Grade

VISIBILITY = "visible"


def results(grade: Grade, task: Assignment) -> dict[str, Any]:
    """The ``results.json`` document."""
    tests = []
    for group in grade.groups:
        checks = "\n".join(f"{name}: {status}" + (f": {detail}" if detail else "") for name, status, detail in
                           group["checks"])
        tests.append({
            "name": GROUP_WORDS.get(group["group"], group["group"]),
            "score": group["score"],
            "max_score": group["maximum"],
            "status": "passed" if group["score"] >= group["maximum"] else "failed",
            "output": checks or group["status"],
            "visibility": VISIBILITY,
        })
    return {
        "score": grade.score,
        "output": feedback(grade, task),
        "output_format": "md",
        "visibility": VISIBILITY,
        "stdout_visibility": "hidden",
        "tests": tests,
    }
