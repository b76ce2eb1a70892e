"""The repro folders of issue 16 through the real CLI and sandbox, in the default (dynamic) mode:
modules of a package, notebooks, scripts that do real work, stdin, and missing dependencies."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.sandbox

ROOT = Path(__file__).resolve().parent.parent
LOADING = ROOT / "fixtures" / "loading"


def _attncheck(*args: str, stdin: str | None = None) -> tuple[int, dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    completed = subprocess.run(
        [sys.executable, "-m", "attncheck", "--format", "json", "--no-cache", *args],
        capture_output=True, text=True, cwd=ROOT, env=env, input=stdin, timeout=600, check=False,
    )
    assert completed.returncode in (0, 1), completed.stderr[-2000:]
    return completed.returncode, json.loads(completed.stdout)


@pytest.fixture(scope="module")
def run() -> dict[str, list[dict]]:
    """One run over every loading fixture: the targets of each file, by its name relative to LOADING."""
    _, report = _attncheck(str(LOADING))
    targets: dict[str, list[dict]] = {}
    for target in report["targets"]:
        name = Path(target["path"]).resolve().relative_to(LOADING).as_posix()
        targets.setdefault(name, []).append(target)
    return targets


def _only(run: dict[str, list[dict]], name: str) -> dict:
    (target,) = run[name]
    return target


PACKAGE_MODULES = ["package-repo/mypkg/models/attention.py", "package-repo/mypkg/models/abs_attention.py"]


@pytest.mark.parametrize("name", PACKAGE_MODULES)
def test_modules_of_a_package_import_through_it_and_pass(run: dict[str, list[dict]], name: str) -> None:
    """Relative (``from ..config``) and the package's own absolute (``from mypkg.config``) imports."""
    target = _only(run, name)
    assert (target["status"], target["reason"]) == ("passed", "")


def test_notebook_of_definitions_is_checked_dynamically(run: dict[str, list[dict]]) -> None:
    assert _only(run, "notebook/correct.ipynb")["status"] == "passed"


def test_notebook_that_runs_its_model_runs_definitions_only_and_finds_the_bugs(run: dict[str, list[dict]]) -> None:
    target = _only(run, "notebook/homework.ipynb")
    assert target["status"] == "failed"
    assert "ran the notebook's definitions only; 2 top-level statements skipped" in target["reason"]


def test_training_script_runs_its_definitions_and_says_why(run: dict[str, list[dict]]) -> None:
    target = _only(run, "training_script.py")
    assert target["status"] == "passed"
    assert target["reason"].startswith("ran its definitions only: the top level does real work (load() at line 32")


def test_whole_import_failing_outside_the_definitions_falls_back(run: dict[str, list[dict]]) -> None:
    target = _only(run, "fails_outside_definitions.py")
    assert target["status"] == "passed"
    assert "importing the whole file failed at line 10 (AssertionError: run download.py first)" in target["reason"]


def test_import_time_error_of_the_users_code_stays_an_error(run: dict[str, list[dict]]) -> None:
    target = _only(run, "import_time_error.py")
    assert target["status"] == "error"
    assert target["reason"] == "importing the module failed: KeyError: 'large' (line 9)"


def test_absent_third_party_module_skips_the_target(run: dict[str, list[dict]]) -> None:
    target = _only(run, "absent_dependency.py")
    assert target["status"] == "skipped"
    assert target["reason"] == "needs attncheck_absent_dependency (not installed in this environment)"


def test_einops_repro_is_skipped_when_einops_is_absent_and_checked_when_present(run: dict[str, list[dict]]) -> None:
    target = _only(run, "einops_missing.py")
    if importlib.util.find_spec("einops") is None:
        assert (target["status"], target["reason"]) == ("skipped", "needs einops (not installed in this environment)")
    else:
        assert target["status"] == "passed", target["reason"]


def test_stdin_buffer_is_what_the_dynamic_check_runs() -> None:
    """A correct mymodel.py is on disk; the buffer takes the softmax over the queries (ATT202)."""
    buffer = (LOADING / "stdin" / "stdin_buffer.py").read_text(encoding="utf-8")
    code, report = _attncheck("--stdin-filename", str(LOADING / "stdin" / "mymodel.py"), "-", stdin=buffer)
    assert code == 1
    (target,) = report["targets"]
    assert target["status"] == "failed"
    att202 = [f for f in report["findings"] if f["code"] == "ATT202"]
    assert [(f["severity"], f["source"]) for f in att202] == [("error", "both")]


def test_package_repo_and_notebook_repros_exit_clean() -> None:
    """The README lines: ``attncheck package-repo`` and ``attncheck notebook/correct.ipynb`` check
    every target dynamically and exit 0."""
    code, report = _attncheck(str(LOADING / "package-repo"), str(LOADING / "notebook" / "correct.ipynb"))
    assert code == 0, report["targets"]
    assert [t["status"] for t in report["targets"]] == ["passed", "passed", "passed"]
