"""The grading-class repros (issue 18), graded end to end once: verdicts, outputs and their formats."""

from __future__ import annotations

import csv
import json

import pytest

from attncheck.grade import assignment, csv_export, outputs, schedule, submissions
from attncheck.grade.record import GRADED, UNREADABLE

pytest.importorskip("torch")
pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

CORRECT = ("s01", "s02", "s03", "s04", "s09")
MISTAKES = {"s05": {"ATT201"}, "s06": {"ATT202"}, "s07": {"ATT301", "ATT906"}, "s08": {"ATT104"},
            "s10": {"ATT101", "ATT102", "ATT201", "ATT204", "ATT301"}}
GRADESCOPE_SCHEMA = {
    "type": "object",
    "required": ["score", "tests"],
    "properties": {
        "score": {"type": "number"},
        "output": {"type": "string"},
        "output_format": {"enum": ["text", "html", "simple_format", "md", "ansi"]},
        "visibility": {"enum": ["hidden", "after_due_date", "after_published", "visible"]},
        "stdout_visibility": {"enum": ["hidden", "after_due_date", "after_published", "visible"]},
        "tests": {"type": "array", "items": {
            "type": "object",
            "required": ["score", "max_score", "name", "output", "visibility"],
            "properties": {
                "score": {"type": "number", "minimum": 0}, "max_score": {"type": "number", "minimum": 0},
                "name": {"type": "string"}, "output": {"type": "string"},
                "status": {"enum": ["passed", "failed"]},
                "visibility": {"enum": ["hidden", "after_due_date", "after_published", "visible"]},
            },
            "additionalProperties": False,
        }},
    },
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory, grading_class):
    out = tmp_path_factory.mktemp("grade-out")
    task = assignment.load(None)
    plan = schedule.Plan(submissions.find(grading_class), task, out, seed=1234)
    grades = schedule.run(plan)
    outputs.write_all(out, grades, task, plan.seed)
    return out, {g.student: g for g in grades}, task


@pytest.mark.parametrize("student", CORRECT)
def test_a_correct_submission_gets_full_marks(graded, student):
    _, grades, _ = graded
    grade = grades[student]
    assert grade.status == GRADED, grade.problem
    assert grade.score == grade.maximum, [g for g in grade.groups if g["score"] < g["maximum"]]


def test_a_fully_masked_row_left_nan_is_advice_by_default(graded):
    """s03's -inf fill gives NaN only to a query whose keys are all masked (ATT303): reported, not charged."""
    _, grades, _ = graded
    grade = grades["s03"]
    mask = next(g for g in grade.groups if g["group"] == "mask")
    assert ["fully-masked-rows", "advice"] in [list(c[:2]) for c in mask["checks"]]
    assert {m.code for m in grade.mistakes if not m.counts} >= {"ATT303"}
    assert grade.codes() == ""


@pytest.mark.parametrize("student", sorted(MISTAKES))
def test_a_buggy_submission_loses_points_for_its_own_mistakes(graded, student):
    _, grades, _ = graded
    grade = grades[student]
    assert grade.status == GRADED
    assert grade.score < grade.maximum
    assert MISTAKES[student] <= {m.code for m in grade.mistakes}


def test_the_score_is_what_the_rubric_gives_for_the_checks_reported(graded):
    _, grades, task = graded
    for grade in grades.values():
        assert grade.score == pytest.approx(sum(g["score"] for g in grade.groups))
        assert grade.maximum == task.rubric.maximum
        for group in grade.groups:
            if any(status == "failed" for _, status, _ in group["checks"]) and group["group"] != "static":
                assert group["score"] < group["maximum"], (grade.student, group)


def test_a_syntax_error_is_a_could_not_be_read_row_with_zero(graded):
    _, grades, _ = graded
    grade = grades["s11"]
    assert grade.status == UNREADABLE and grade.score == 0
    assert grade.problem.startswith("could not be read: attention.py, line 2: syntax error")


def test_the_csv_has_a_row_per_student_and_a_column_per_check_group(graded):
    out, grades, task = graded
    with (out / outputs.CSV).open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == csv_export.columns(task.rubric.columns)
    assert [r["student"] for r in rows] == sorted(grades)
    for row in rows:
        assert float(row["score"]) == pytest.approx(sum(float(row[g]) for g in task.rubric.columns))
        assert float(row["max"]) == task.rubric.maximum


def test_gradescope_results_follow_the_autograder_spec(graded):
    jsonschema = pytest.importorskip("jsonschema")
    out, grades, _ = graded
    for student, grade in grades.items():
        document = json.loads((out / outputs.GRADESCOPE / student / outputs.RESULTS).read_text())
        jsonschema.validate(document, GRADESCOPE_SCHEMA)
        assert document["score"] == pytest.approx(sum(t["score"] for t in document["tests"]))
        assert sum(t["max_score"] for t in document["tests"]) == grade.maximum


def test_feedback_names_the_line_and_explains_but_never_shows_the_solution(graded):
    out, _, _ = graded
    text = (out / outputs.FEEDBACK / "s05.md").read_text()
    assert "### line 25: wrong-scale (ATT201)" in text
    assert "Why this is wrong: The dot product of two" in text
    assert "Use instead" not in text and "```" not in text and "q.size(-1))" not in text


def test_the_html_report_is_one_self_contained_page(graded):
    out, grades, _ = graded
    page = (out / outputs.HTML).read_text()
    assert page.count("<tr>") == len(grades) + 1
    assert 'id="heatmap"' in page and 'id="distribution"' in page
    assert page.count('class="attention"') >= 2 * 5  # student and reference weights, side by side
    assert "http://" not in page and "https://" not in page and "<link" not in page


def test_the_attention_weights_shown_match_the_reference_for_a_correct_module_only(graded):
    _, grades, _ = graded

    def gap(student: str) -> float:
        shown = grades[student].weights
        return max(abs(a - b) for row, ref in zip(shown["student"], shown["reference"], strict=True)
                   for a, b in zip(row, ref, strict=True))

    assert gap("s01") < 1e-6 and gap("s09") < 1e-6  # float32 rounding: the module runs in float32
    assert gap("s05") > 1e-3 and gap("s06") > 1e-3
