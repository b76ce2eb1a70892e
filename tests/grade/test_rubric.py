"""The rubric turns the checker's verdicts into points: full, partial, not applicable, required, crashed."""

from __future__ import annotations

from pathlib import Path

import pytest

from attncheck.findings import Check, Finding, Severity, Span, Target, TargetResult
from attncheck.grade import assignment, rubric

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "grading" / "assignment.toml"


def _result(*checks: tuple[str, str], status: str = "passed") -> TargetResult:
    target = Target("a.py", "Attention", 1, ("attention",), True)
    return TargetResult(target, status, checks=[Check(name, state) for name, state in checks])


def _by_group(scores: list[rubric.GroupScore]) -> dict[str, rubric.GroupScore]:
    return {s.group: s for s in scores}


def test_every_check_passed_is_full_marks_and_groups_without_checks_keep_their_points():
    scores = _by_group(rubric.score_groups(rubric.Rubric(), _result(("forward", "passed"), ("reference", "passed"))))
    assert scores["shape"].score == scores["shape"].maximum == 10
    assert scores["reference"].status == "passed"
    assert scores["mask"].status == "n/a" and scores["mask"].score == 15


def test_partial_credit_is_the_share_of_checks_that_passed_and_all_or_nothing_without_it():
    result = _result(("reference", "passed"), ("softmax-axis", "failed"), ("weights-sum", "skipped"))
    partial = _by_group(rubric.score_groups(rubric.Rubric(), result))["reference"]
    assert (partial.score, partial.status) == (15.0, "partial")
    strict = _by_group(rubric.score_groups(rubric.Rubric(partial=False), result))["reference"]
    assert (strict.score, strict.status) == (0.0, "failed")


def test_a_required_group_that_never_ran_earns_nothing():
    scores = _by_group(rubric.score_groups(rubric.Rubric(required=("causal",)), _result(("forward", "passed"))))
    assert (scores["causal"].score, scores["causal"].status) == (0.0, "failed")


def test_a_forward_crash_or_no_target_zeroes_every_dynamic_group():
    crashed = rubric.score_groups(rubric.Rubric(), _result(("forward", "failed"), status="failed"))
    assert all(s.score == 0 for s in crashed)
    assert all(s.score == 0 and s.status == "not run" for s in rubric.score_groups(rubric.Rubric(), None))


def test_a_fully_masked_row_check_is_advice_unless_the_rubric_charges_att303():
    result = _result(("reference-masked", "passed"), ("masked-keys", "passed"), ("fully-masked-rows", "failed"))
    free = _by_group(rubric.score_groups(rubric.Rubric(), result))["mask"]
    assert (free.score, free.status) == (15, "passed")
    assert ("fully-masked-rows", rubric.ADVICE, "") in free.checks
    charged = rubric.Rubric(costs={"ATT303": 2})
    graded = _by_group(rubric.score_groups(charged, result))["mask"]
    assert (graded.score, graded.status) == (10, "partial")
    assert rubric.Rubric().is_advice("ATT303") and not charged.is_advice("ATT303")
    assert not rubric.Rubric(costs={"ATT201": 0}).is_advice("ATT201")


def test_low_precision_checks_are_one_group_by_prefix():
    assert rubric.group_of("low-precision-bfloat16") == "low_precision"
    assert rubric.group_of("rope-fingerprint") == "variant"
    assert rubric.group_of("something-new") is None


def _finding(code: str, source: str = "static") -> Finding:
    from attncheck.catalogue import CODES

    return Finding(code, CODES[code].severity, "msg", "a.py", Span(3), source=source)


def test_static_findings_cost_their_points_and_the_advice_codes_cost_nothing():
    grading = rubric.Rubric(costs={"ATT201": 3})
    score = rubric.score_static(grading, [_finding("ATT201"), _finding("ATT302"), _finding("ATT303"),
                                          _finding("ATT905", source="dynamic")])
    assert score.score == 7 and score.status == "partial"
    assert [status for _, status, _ in score.checks] == ["failed", "advice", "advice"]
    floor = rubric.score_static(rubric.Rubric(), [_finding("ATT101")] * 9)
    assert floor.score == 0 and floor.status == "failed"
    assert rubric.Rubric().cost("ATT303") == 0 and rubric.Rubric().cost("ATT101") == 2
    assert Severity.ERROR in rubric.SEVERITY_COST


def test_the_example_assignment_loads_with_its_rubric():
    task = assignment.load(FIXTURE)
    assert task.variant == "mha" and task.target == assignment.AUTO
    assert task.rubric.maximum == 100
    assert task.rubric.costs["ATT201"] == 3
    assert task.digest != assignment.Assignment().digest


def test_a_causal_assignment_requires_the_causal_group_and_declares_it(tmp_path):
    path = tmp_path / "a.toml"
    path.write_text('[assignment]\nvariant = "causal"\n[call]\nheads = 4\n')
    task = assignment.load(path)
    assert "causal" in task.rubric.required
    assert task.declaration() == {"heads": 4, "causal": True}


@pytest.mark.parametrize(("text", "says"), [
    ("[assignment]\nvariant = 'sparse'\n", "assignment.variant must be one of"),
    ("[assignment]\nvariant = 'gqa'\n", "kv_heads"),
    ("[assignment]\nvariant = 'gqa'\nkv_heads = 3\n[call]\nheads = 4\n", "heads = 4 is not a multiple of kv_heads = 3"),
    ("[assignment]\nvariant = 'rope'\n", "assignment.rope must be one of half, interleaved for a rope assignment"),
    ("[assignment]\nvariant = 'rope'\nrope = 'half'\nrope_base = 'big'\n", "rope_base must be a number above 1"),
    ("[rubric.points]\nshapes = 3\n", "unknown group 'shapes'"),
    ("[rubric.static]\nATT999 = 1\n", "unknown code 'ATT999'"),
    ("[rubric.points]\nshape = -1\n", "rubric.points.shape must be a number of points"),
    ("[grading]\n", "unknown key 'grading'"),
    ("[assignment\n", "invalid TOML"),
    ("[call]\nmask = 'kept'\n", r"\[call\]: .*mask must be one of"),
    ("[call]\nwidth = 3\n", r"\[call\]: .*unknown key 'width'"),
])
def test_a_bad_assignment_says_what_is_wrong_in_one_line(tmp_path, text, says):
    path = tmp_path / "a.toml"
    path.write_text(text)
    with pytest.raises(assignment.AssignmentError, match=says) as raised:
        assignment.load(path)
    assert str(raised.value).startswith(str(path)) and "\n" not in str(raised.value)


def test_a_target_that_could_not_be_run_earns_nothing_for_the_dynamic_groups():
    skipped = rubric.score_groups(rubric.Rubric(), _result(status="skipped"))
    assert all(s.score == 0 and s.status == "not run" for s in skipped)


def test_the_variant_asked_for_is_said_in_words(tmp_path):
    path = tmp_path / "a.toml"
    path.write_text('[assignment]\nvariant = "gqa"\nkv_heads = 2\n')
    assert assignment.load(path).asked_for() == "grouped-query attention with 2 K/V heads"
    path.write_text('[assignment]\nvariant = "rope"\nrope = "interleaved"\nrope_base = 500000\n')
    assert assignment.load(path).declaration() == {"rope": "interleaved", "rope_base": 500000}
    assert assignment.Assignment().asked_for() == "multi-head attention"
