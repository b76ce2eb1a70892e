"""The README's pre-commit configuration and the GitHub Action, run as a user runs them.

The pre-commit snippet is taken from the README, its ``<...>`` values set to this checkout
and its HEAD commit, and run by the real ``pre-commit`` on a scratch git repository (so it
checks what is committed). The action's ``run:`` steps are taken from ``action.yml`` and run
in bash with its inputs substituted, in a fresh virtual environment, as a runner would.
Both install attncheck from this checkout with pip (a minute or so).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.test_cli import BUG

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
README = (ROOT / "README.md").read_text(encoding="utf-8")


def readme_block(heading: str, language: str, index: int = 0) -> str:
    """The ``index``-th fenced ``language`` block of the README's section ``heading``."""
    section = README.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, re.DOTALL)[index]


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def scratch_repo(tmp_path: Path) -> Path:
    """A user's repository: a buggy model, and the same bug in a folder its config excludes."""
    repo = tmp_path / "repo"
    (repo / "vendored").mkdir(parents=True)
    (repo / "model.py").write_text(BUG)
    (repo / "vendored" / "theirs.py").write_text(BUG)
    (repo / "pyproject.toml").write_text('[tool.attncheck]\nexclude = ["vendored/"]\n')
    git("init", "-q", cwd=repo)
    return repo


@pytest.mark.slow
def test_the_readme_pre_commit_configuration_runs(scratch_repo, tmp_path):
    if not (ROOT / ".git").exists():
        pytest.skip("needs attncheck's own git repository: pre-commit clones the hook at a commit")
    config = readme_block("pre-commit", "yaml")
    assert "<ATTNCHECK_REPO>" in config and "<ATTNCHECK_REV>" in config
    head = git("rev-parse", "HEAD", cwd=ROOT).strip()
    (scratch_repo / ".pre-commit-config.yaml").write_text(
        config.replace("<ATTNCHECK_REPO>", str(ROOT)).replace("<ATTNCHECK_REV>", head))
    git("add", "-A", cwd=scratch_repo)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home")}
    run = subprocess.run([sys.executable, "-m", "pre_commit", "run", "--all-files"], cwd=scratch_repo, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "model.py:4:20: ATT204 torch.sqrt(64)" in run.stdout
    assert "vendored" not in run.stdout  # the project's exclude applies to the files pre-commit names
    (scratch_repo / "model.py").write_text(BUG.replace("torch.sqrt(64)", "8.0"))
    git("add", "-A", cwd=scratch_repo)
    clean = subprocess.run([sys.executable, "-m", "pre_commit", "run", "--all-files"], cwd=scratch_repo, env=env,
                           capture_output=True, text=True, timeout=600)
    assert clean.returncode == 0, clean.stdout + clean.stderr


def run_action(inputs: dict[str, str], cwd: Path, venv: Path) -> subprocess.CompletedProcess:
    """Every step of ``action.yml`` in order, as a runner would, stopping at the first that fails."""
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    values = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()} | inputs

    def substitute(text: str) -> str:
        text = text.replace("${{ github.action_path }}", str(ROOT))
        return re.sub(r"\$\{\{ inputs\.(\w+) \}\}", lambda m: values[m.group(1)], text)

    assert action["runs"]["using"] == "composite"
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    step = None
    for spec in action["runs"]["steps"]:
        step_env = {**env, **{key: substitute(str(value)) for key, value in spec.get("env", {}).items()}}
        step = subprocess.run(["bash", "-e", "-c", substitute(spec["run"])], cwd=cwd, env=step_env,
                              capture_output=True, text=True, timeout=600)
        if step.returncode:
            break
    assert step is not None
    return step


@pytest.mark.slow
def test_the_action_annotates_and_writes_sarif(scratch_repo, tmp_path):
    venv = tmp_path / "runner"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    annotations = run_action({"paths": "model.py"}, scratch_repo, venv)
    assert annotations.returncode == 1, annotations.stderr
    assert annotations.stdout.startswith("::error file=model.py,line=4,col=20,")
    assert shutil.which("attncheck", path=str(venv / "bin"))
    sarif = run_action({"format": "sarif", "output": "attncheck.sarif"}, scratch_repo, venv)
    assert sarif.returncode == 1, sarif.stderr
    document = json.loads((scratch_repo / "attncheck.sarif").read_text(encoding="utf-8"))
    jsonschema.validate(document, json.loads((DATA / "sarif-schema-2.1.0.json").read_text()))
    assert [r["ruleId"] for r in document["runs"][0]["results"]] == ["ATT204"]  # vendored/ is excluded
