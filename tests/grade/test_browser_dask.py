"""The HTML report in a real headless browser, and grading on a Dask cluster: each skipped cleanly
when Chromium or dask is not installed (CI passes without them)."""

from __future__ import annotations

import pytest

from attncheck.grade import assignment, outputs, schedule, submissions
from attncheck.grade.record import GRADED, Grade, Mistake
from bench import render_grade_report


def _grade(student: str, score: float) -> Grade:
    groups = [{"group": "reference", "score": score, "maximum": 90.0, "status": "partial", "checks": []},
              {"group": "static", "score": 10.0, "maximum": 10.0, "status": "passed", "checks": []}]
    mistakes = [Mistake("ATT201", "wrong-scale", "error", "scores divided by sqrt(S)", "line 3", 3, "static", 2.0)]
    weights = {"student": [[0.5, 0.5], [0.1, 0.9]], "reference": [[0.6, 0.4], [0.2, 0.8]]}
    return Grade(student, "d" * 64, GRADED, score + 10, 100.0, groups, mistakes if score < 90 else [],
                 target="Attention", file="a.py", weights=weights)


@pytest.mark.slow
def test_the_report_renders_and_sorts_in_a_headless_browser(tmp_path):
    if render_grade_report.browser() is None:
        pytest.skip("no Chromium installed (apt-get install -y chromium)")
    grades = [_grade("bea", 40.0), _grade("al", 90.0), _grade("cy", 65.0)]
    outputs.write_all(tmp_path, grades, assignment.Assignment(), seed=3)
    page = tmp_path / outputs.HTML
    assert render_grade_report.students_in_order(render_grade_report.dump_dom(page)) == ["bea", "al", "cy"]
    dom = render_grade_report.dump_dom(page, sort="score")
    assert render_grade_report.students_in_order(dom) == ["bea", "cy", "al"]
    assert dom.count('class="attention"') == 6 and 'id="heatmap"' in dom
    shot = tmp_path / "report.png"
    render_grade_report.screenshot(page, shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.sandbox
def test_grading_on_a_dask_local_cluster_gives_the_local_grades(tmp_path, grading_class):
    distributed = pytest.importorskip("distributed")
    pytest.importorskip("torch")
    found = [s for s in submissions.find(grading_class) if s.student in ("s01", "s05", "s11")]
    task = assignment.Assignment()
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        plan = schedule.Plan(found, task, tmp_path / "dask", seed=5, dask_scheduler=address)
        remote = schedule.run(plan)
    local = schedule.run(schedule.Plan(found, task, tmp_path / "local", seed=5))
    assert [(g.student, g.status, g.score) for g in remote] == [(g.student, g.status, g.score) for g in local]
    assert remote[0].score == remote[0].maximum and remote[1].score < remote[1].maximum
    assert remote[0].isolation.startswith("forked jail")
