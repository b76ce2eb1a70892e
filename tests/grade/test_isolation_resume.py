"""One student's code cannot read another's, and cannot cost the run; an interrupted run resumes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from attncheck.dynamic.harness import rundir
from attncheck.grade import assignment, schedule, submissions
from attncheck.grade.gradebook import Gradebook
from attncheck.grade.record import GRADED, NOT_RUN

pytest.importorskip("torch")
pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

CORRECT = (Path(__file__).resolve().parents[2] / "fixtures" / "grading" / "class" / "s01" / "attention.py").read_text()
SECRET = "the answers to homework 3"
HOSTILE_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "hostile"


def _plan(root: Path, out: Path, **changes) -> schedule.Plan:
    task = assignment.Assignment(timeout=4.0)
    return schedule.Plan(submissions.find(root), task, out, seed=7, **changes)


def test_a_submission_that_reads_a_sibling_or_the_class_folder_gets_nothing(tmp_path):
    root = tmp_path / "class"
    (root / "alice").mkdir(parents=True)
    (root / "alice" / "attention.py").write_text(CORRECT)
    (root / "alice" / "solution_notes.txt").write_text(SECRET)
    (root / "mallory").mkdir()
    snoop = textwrap.dedent(f"""
        import os
        from pathlib import Path
        here = Path(__file__).resolve().parent
        places = [here.parent, here.parent.parent, Path({str(root)!r}), Path({str(root / "alice")!r})]
        def peek(place):
            try:
                return [os.path.join(place, name) for name in os.listdir(place)]
            except OSError:
                return []
        stolen = [p for place in places for p in peek(place) if "alice" in p or "solution_notes" in p]
        try:
            stolen.append(open({str(root / "alice" / "solution_notes.txt")!r}).read())
        except OSError:
            pass
        if stolen:
            raise RuntimeError("LEAKED " + " ".join(stolen))
        """)
    (root / "mallory" / "attention.py").write_text(snoop + CORRECT)
    grades = {g.student: g for g in schedule.run(_plan(root, tmp_path / "out"))}
    mallory = grades["mallory"]
    assert "LEAKED" not in mallory.problem, mallory.problem
    assert mallory.status == GRADED and mallory.score == mallory.maximum
    assert mallory.isolation.startswith("forked jail")
    assert grades["alice"].score == grades["alice"].maximum


MEMORY_SNOOP = textwrap.dedent("""
    import gc
    NEEDLE = "homework-3-" + "answer-"  # never the whole secret, so the search does not find itself
    def scan():
        found = [o for o in gc.get_objects() if isinstance(o, str) and NEEDLE in o
                 and o.split(NEEDLE, 1)[1][:5] == "XYZ" + "ZY"]
        with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as memory:
            for region in (line.split() for line in maps):
                start, end = (int(x, 16) for x in region[0].split("-"))
                if "r" not in region[1] or end - start > 64 << 20 or region[-1].startswith("[v"):
                    continue
                try:
                    memory.seek(start)
                    data = memory.read(end - start)
                except (OSError, ValueError, OverflowError):
                    continue
                at = data.find(NEEDLE.encode())
                while at >= 0:
                    if data[at + len(NEEDLE): at + len(NEEDLE) + 5] == b"XYZ" + b"ZY":
                        found.append(start + at)
                    at = data.find(NEEDLE.encode(), at + 1)
        return found
    if scan():
        raise RuntimeError("LEAKED from an earlier student's memory")
    """)


def test_a_child_holds_no_memory_of_the_students_graded_before_it(tmp_path):
    root = tmp_path / "class"
    root.mkdir()
    (root / "alice.py").write_text("# homework-3-answer-XYZZY: my notes\n" + CORRECT)
    (root / "mallory.py").write_text(MEMORY_SNOOP + CORRECT)
    grades = {g.student: g for g in schedule.run(_plan(root, tmp_path / "out"))}
    assert grades["alice"].status == GRADED
    assert grades["mallory"].status == GRADED, grades["mallory"].problem
    assert grades["mallory"].score == grades["mallory"].maximum


# Each runs while the submission is imported. In a class body, because the dynamic check runs only
# the definitions of a module whose top level does work (issue 16): a bare top-level loop is skipped.
HOSTILE = {
    "hang": "import time\n\n\nclass Hang:\n    while True:\n        time.sleep(0.01)\n",
    "crash": "import os, signal\n\n\nclass Crash:\n    os.kill(os.getpid(), signal.SIGSEGV)\n",
    "bomb": "class Bomb:\n    blocks = []\n    while True:\n        blocks.append(bytearray(256 * 1024 * 1024))\n",
    "flood": "import sys\n\n\nclass Flood:\n    while True:\n        sys.stdout.write('x' * 65536)\n",
}


def test_a_hang_a_crash_a_memory_bomb_and_an_output_flood_cost_only_their_own_row(tmp_path):
    root = tmp_path / "class"
    root.mkdir()
    for name, prelude in HOSTILE.items():
        (root / f"{name}.py").write_text(prelude + CORRECT)
    (root / "zoe.py").write_text(CORRECT)
    grades = {g.student: g for g in schedule.run(_plan(root, tmp_path / "out"))}
    for name in HOSTILE:
        assert grades[name].status == NOT_RUN, (name, grades[name].problem)
        assert grades[name].problem and all(g["score"] == 0 for g in grades[name].groups if g["group"] != "static")
    assert "timed out" in grades["hang"].problem
    assert "SIGSEGV" in grades["crash"].problem
    assert grades["zoe"].status == GRADED and grades["zoe"].score == grades["zoe"].maximum


def test_an_interrupted_run_resumes_and_a_rerun_grades_only_what_changed(tmp_path):
    root = tmp_path / "class"
    root.mkdir()
    for name in ("ann", "ben", "cal"):
        (root / f"{name}.py").write_text(CORRECT)
    out = tmp_path / "out"
    seen: list[str] = []

    def interrupt_after_one(grade) -> None:
        seen.append(grade.student)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        schedule.run(_plan(root, out), interrupt_after_one)
    assert seen == ["ann"]
    graded: list[str] = []
    grades = schedule.run(_plan(root, out), lambda grade: graded.append(grade.student))
    assert [g.status for g in grades] == [GRADED] * 3
    book = Gradebook(out)
    runs = book.connection.execute("SELECT submissions, graded FROM runs ORDER BY rowid").fetchall()
    assert runs[-1] == (3, 2)  # ann came from the gradebook
    (root / "cal.py").write_text(CORRECT + "\n# a change\n")
    schedule.run(_plan(root, out))
    schedule.run(_plan(root, out, rerun=True))
    runs = book.connection.execute("SELECT submissions, graded FROM runs ORDER BY rowid").fetchall()
    book.close()
    assert runs[-2:] == [(3, 1), (3, 3)]


def test_grading_ignores_a_submissions_own_config_and_keeps_its_static_errors(tmp_path):
    """Issue 17: a student's attncheck.toml / pyproject.toml ignoring every code is not read, and
    a module that behaves only on the checker's inputs keeps its static error at full severity."""
    root = tmp_path / "class"
    shutil.copytree(HOSTILE_FIXTURES / "forged_pass", root / "mallory")
    (grade,) = schedule.run(_plan(root, tmp_path / "out"))
    scale = [mistake for mistake in grade.mistakes if mistake.code == "ATT201"]
    assert grade.status == GRADED and grade.score < grade.maximum, grade
    assert [mistake.severity for mistake in scale] == ["error"], grade.mistakes


def test_where_the_jail_cannot_be_built_a_submission_is_not_run_unless_the_operator_says_so(tmp_path, monkeypatch):
    """As ``check`` without bubblewrap: no silent run with the whole host visible."""
    from attncheck.dynamic.harness import forked

    monkeypatch.setattr(forked, "jail_available", lambda: False)
    root = tmp_path / "class"
    root.mkdir()
    (root / "ann.py").write_text(CORRECT)
    (refused,) = schedule.run(_plan(root, tmp_path / "out"))
    assert refused.status == NOT_RUN and "--unsafe-no-sandbox" in refused.problem, refused.problem
    (ran,) = schedule.run(_plan(root, tmp_path / "unsafe", unsafe_no_sandbox=True))
    assert ran.status == GRADED and ran.score == ran.maximum and ran.isolation == forked.FORKED_RLIMITS


def test_a_grader_killed_with_sigkill_leaves_no_child_running_and_no_staged_code_behind(tmp_path):
    """Issue 17: ``kill -9`` of ``attncheck grade`` while a submission's forward runs: its zygote
    sees the order socket close and kills the child at once (it ran on to its time limit), and
    the staged copies lie in a locked run folder, which the next run sweeps (a bare temp folder,
    never removed, before)."""
    root, temp = tmp_path / "class", tmp_path / "temp"
    (root / "mallory").mkdir(parents=True)
    temp.mkdir()
    shutil.copy(HOSTILE_FIXTURES / "outlive_the_grader.py", root / "mallory" / "attention.py")
    grader = subprocess.Popen([sys.executable, "-m", "attncheck", "grade", str(root), "--out", str(tmp_path / "out"),
                               "--jobs", "1"], env={**os.environ, "TMPDIR": str(temp)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        tree = _jailed_child_tree(grader.pid, deadline=time.monotonic() + 60)
    finally:
        grader.send_signal(signal.SIGKILL)
        grader.wait()
    killed_at = time.monotonic()
    while alive := [pid for pid in tree if os.path.exists(f"/proc/{pid}")]:
        assert time.monotonic() - killed_at < 6, f"the grader's processes ran on after it was killed: {alive}"
        time.sleep(0.2)
    left = list(temp.iterdir())
    assert left and all(path.name.startswith(rundir.PREFIX) for path in left), left
    old = time.time() - 2 * rundir.FRESH_S
    for path in left:
        os.utime(path, (old, old))
    assert sorted(rundir.sweep_stale(temp)) == sorted(left) and not list(temp.iterdir())


def _jailed_child_tree(pid: int, deadline: float) -> set[int]:
    """The processes below ``pid`` once its jailed child runs user code: the zygote, the forked
    child, pid 1 of its namespace and pid 2 (four levels), a second after they appeared."""
    while time.monotonic() < deadline:
        levels = [{pid}]
        while levels[-1]:
            levels.append({child for parent in levels[-1] for child in _children(parent)})
        if len(levels) > 5:
            time.sleep(1.0)
            return set().union(*levels[1:])
        time.sleep(0.1)
    raise AssertionError("the jailed child never started")


def _children(pid: int) -> set[int]:
    try:
        return {int(child) for task in os.listdir(f"/proc/{pid}/task")
                for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split()}
    except OSError:
        return set()


def test_a_submission_cannot_choose_the_size_of_the_weights_the_report_draws(tmp_path):
    """Issue 17: the first softmax a forward computes is drawn in report.html; a correct module
    whose first softmax was 300 x 300 put 90 000 floats in the gradebook and 90 000 cells in the
    report (5000 x 5000 fits a reply: gigabytes). Only a square of at most MAX_SHOWN_SIDE is drawn."""
    from attncheck.grade import outputs, worker

    root = tmp_path / "class"
    (root / "mallory").mkdir(parents=True)
    shutil.copy(HOSTILE_FIXTURES / "huge_attention_weights.py", root / "mallory" / "attention.py")
    (grade,) = schedule.run(_plan(root, tmp_path / "out"))
    assert grade.status == GRADED and grade.score == grade.maximum, (grade.status, grade.problem)
    assert all(len(matrix) < 300 for matrix in grade.weights.values())  # the run's sequence is far shorter
    outputs.write_all(tmp_path / "out", [grade], assignment.Assignment(), 7)
    assert (tmp_path / "out" / "report.html").read_text().count("<rect") < 5000
    for matrix in grade.weights.values():
        assert len(matrix) <= worker.MAX_SHOWN_SIDE and all(len(row) <= worker.MAX_SHOWN_SIDE for row in matrix)


def test_a_submission_cannot_buy_time_with_its_number_of_targets(tmp_path):
    """Issue 17: a child gets the timeout once per target, and a submission chooses how many
    targets it has, and the runner runs them again one by one after a timeout: twelve classes
    whose forward hangs held the worker for 320 s at this test's 4 s timeout. All of a
    submission's children now share MAX_TIMEOUTS timeouts (16 s), less than twelve alone."""
    root = tmp_path / "class"
    (root / "mallory").mkdir(parents=True)
    text = (HOSTILE_FIXTURES / "many_hanging_targets.py").read_text()
    head, hangs = text.split("\nclass Attention(")
    copies = "".join(f"\nclass Attention{index}({hangs}" for index in range(12))
    (root / "mallory" / "attention.py").write_text(head + copies)
    started = time.monotonic()
    (grade,) = schedule.run(_plan(root, tmp_path / "out"))
    seconds = time.monotonic() - started
    assert seconds < 12 * 4.0, f"{seconds:.1f} s for one submission"  # 320 s on main, 28 s here
    assert grade.status != GRADED or grade.score < grade.maximum, grade
