"""The dynamic checker through the real command line and the real sandbox: hostile files end in a
clear status, a good file beside them is still checked, and attncheck itself never shows a traceback.

Every case runs in one ``attncheck`` invocation (module scope): each child imports torch, so this
is the slow part of the suite, kept to one process start per file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.sandbox

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "fixtures" / "hostile"
GOOD = ROOT / "fixtures" / "correct" / "dyn_self_attention.py"
TIMEOUT_S = 3
EXPECTED = {
    "loop_forward.py": ("error", "timed out after 3 s"),
    "segfault.py": ("error", "killed by signal SIGSEGV"),
    "os_exit.py": ("error", "exited with status 3"),
    "sys_exit_import.py": ("error", "importing the module failed: SystemExit"),
    "fork_loop.py": ("failed", "PermissionError"),  # the fork is refused: a crash of the user's forward
    "monkeypatch_torch.py": ("failed", ""),  # patched allclose lives in the child; the parent judges
}


def attncheck(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "attncheck", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


@pytest.fixture(scope="module")
def hostile_run():
    paths = [str(HOSTILE / name) for name in EXPECTED] + [str(GOOD)]
    start = time.monotonic()
    ran = attncheck(*paths, "--timeout", str(TIMEOUT_S), "--format", "json", "--device", "cpu", "--jobs", "2")
    return ran, json.loads(ran.stdout), time.monotonic() - start


def test_hostile_files_end_in_a_clear_status(hostile_run):
    ran, report, _ = hostile_run
    assert ran.returncode == 1, ran.stderr
    assert "Traceback" not in ran.stderr and "Traceback" not in ran.stdout
    by_file = {Path(t["path"]).name: t for t in report["targets"]}
    for name, (status, reason) in EXPECTED.items():
        target = by_file[name]
        assert target["status"] == status, (name, target["reason"])
        if status == "error":
            assert reason in target["reason"], (name, target["reason"])
        else:
            assert any(reason in f["message"] for f in report["findings"] if f["path"].endswith(name))


def test_a_good_file_beside_them_is_still_checked(hostile_run):
    _, report, _ = hostile_run
    good = next(t for t in report["targets"] if t["path"].endswith(GOOD.name))
    assert good["status"] == "passed"
    assert good["device"] == "cpu"
    assert good["isolation"] in ("bubblewrap", "rlimits only")
    assert {c["name"] for c in good["checks"]} >= {"reference", "batch-independence", "causal"}
    assert not [f for f in report["findings"] if f["path"].endswith(GOOD.name)]


def test_static_only_runs_no_child(tmp_path):
    ran = attncheck(str(HOSTILE / "loop_import.py"), "--static-only", "--format", "json")
    report = json.loads(ran.stdout)
    assert [t["status"] for t in report["targets"]] == ["skipped"]
    assert report["targets"][0]["reason"] == "static-only run"
