"""``attncheck grade`` run by a user who is not root: its jail, its limits and its scores.

The suite itself may run as root (the jail then drops the child to a uid of its own) or not (CI,
a teacher's laptop: the jail is built from user namespaces). As root, the command is run again as
``nobody``; where ``nobody`` cannot run this interpreter (installed under a private home) or the
machine gives unprivileged users no namespaces, the test says so and is skipped.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

CLASS = Path(__file__).resolve().parents[2] / "fixtures" / "grading" / "class"
NOBODY = 65534
START_S = 120


def _as_nobody() -> None:
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)


def _non_root(folder: Path) -> Callable[[], None] | None:
    """How to start a process as a non-root user that can run this interpreter; None when none can."""
    if os.geteuid() != 0:
        return None
    shutil.chown(folder, NOBODY, NOBODY)
    try:
        probe = subprocess.run(
            [sys.executable, "-c", "import torch, attncheck"], preexec_fn=_as_nobody, cwd=folder,
            capture_output=True, text=True, timeout=START_S, check=False,
        )
    except OSError as error:  # the interpreter itself cannot be executed
        pytest.skip(f"nobody cannot run {sys.executable}: {error.strerror}")
    if probe.returncode != 0:
        pytest.skip(f"nobody cannot run this interpreter: {probe.stderr.strip().splitlines()[-1:]}")
    return _as_nobody


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder of its own in the temporary folder, whose parents any user may pass (pytest's are private)."""
    made = Path(tempfile.mkdtemp(prefix="grade-non-root-"))
    yield made
    shutil.rmtree(made, ignore_errors=True)


def test_grade_as_a_non_root_user_scores_in_its_jail(folder):
    drop = _non_root(folder)
    for student in ("s01", "s05"):
        shutil.copytree(CLASS / student, folder / "class" / student)
    if drop is not None:
        for path in [folder, *folder.rglob("*")]:
            shutil.chown(path, NOBODY, NOBODY)
    ran = subprocess.run(
        [sys.executable, "-m", "attncheck", "grade", "class", "--out", "out", "--seed", "3"],
        preexec_fn=drop, cwd=folder, env={**os.environ, "HOME": str(folder)},
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert "Traceback" not in ran.stderr, ran.stderr
    if ran.returncode != 0 and "--unsafe-no-sandbox" in ran.stderr:
        pytest.skip(f"no jail for a non-root user here: {ran.stderr.strip().splitlines()[-1]}")
    assert ran.returncode == 0, ran.stderr
    with (folder / "out" / "gradebook.csv").open(encoding="utf-8") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert (rows["s01"]["score"], rows["s05"]["score"]) == ("100", "78"), rows
    assert "ATT201" in rows["s05"]["mistakes"]
    with sqlite3.connect(folder / "out" / "gradebook.sqlite") as book:
        isolations = {json.loads(grade)["isolation"] for (grade,) in book.execute("SELECT grade FROM grades")}
    assert len(isolations) == 1 and isolations.pop().startswith("forked jail"), isolations
