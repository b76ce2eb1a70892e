"""The Python API and the pytest plugin, as a model repository uses them."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

import attncheck
from tests.test_cli import ROOT, invoke

FIXTURES = ROOT / "fixtures"
SCHEMA = json.loads((ROOT / "attncheck" / "report" / "schema.json").read_text())


def test_check_returns_what_the_json_report_holds(tmp_path):
    model = tmp_path / "model.py"
    shutil.copy(FIXTURES / "buggy" / "scale_missing.py", model)
    report = attncheck.check(model, static_only=True, use_cache=False)
    assert not report.passed
    assert [f.code for f in report.findings] == ["ATT201"]
    document = report.to_json()
    jsonschema.validate(document, SCHEMA)
    command_line = json.loads(invoke("--no-cache", "--format", "json", "model.py", cwd=tmp_path).stdout)
    assert [(f["code"], f["line"]) for f in document["findings"]] == \
        [(f["code"], f["line"]) for f in command_line["findings"]]
    assert document["summary"] == command_line["summary"]
    assert attncheck.check(model, static_only=True, select=["sqrt-of-number"]).passed


def test_check_refuses_bad_input_with_a_clear_message(tmp_path):
    with pytest.raises(ValueError, match="no such file or directory"):
        attncheck.check(tmp_path / "missing.py")
    (tmp_path / "m.py").write_text("x = 1\n")
    with pytest.raises(ValueError, match="--select: no code given"):
        attncheck.check(tmp_path / "m.py", select=[""])


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"user_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_assert_attention_refuses_a_bad_declaration_before_running_anything():
    module = load(FIXTURES / "correct" / "dyn_self_attention.py")
    with pytest.raises(ValueError, match="mask must be one of 'keep', 'blocked', 'additive', got 'kept'"):
        attncheck.assert_attention(module.MultiHeadSelfAttention, mask="kept")
    with pytest.raises(TypeError, match="defined in a file"):
        attncheck.assert_attention(len)


@pytest.mark.sandbox
@pytest.mark.slow
def test_assert_attention_passes_a_correct_class_and_names_the_mistake_of_a_wrong_one():
    good = load(FIXTURES / "correct" / "dyn_self_attention.py")
    report = attncheck.assert_attention(good.MultiHeadSelfAttention, causal=False)
    assert [t.status for t in report.targets] == ["passed"]
    bad = load(FIXTURES / "buggy" / "dyn_wrong_scale.py")
    with pytest.raises(AssertionError) as raised:
        attncheck.assert_attention(bad.WrongScaleAttention)
    assert "WrongScaleAttention: failed" in str(raised.value)
    assert "ATT201" in str(raised.value) and "scale-1/sqrt(d_model)" in str(raised.value)


def pytest_run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def model_repo(tmp_path: Path) -> Path:
    shutil.copy(FIXTURES / "buggy" / "scale_missing.py", tmp_path / "unscaled.py")
    shutil.copy(FIXTURES / "correct" / "dyn_self_attention.py", tmp_path / "good.py")
    (tmp_path / "test_plain.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    return tmp_path


def test_pytest_attncheck_makes_a_test_item_of_each_target(model_repo):
    run = pytest_run("-m", "pytest", "--attncheck", "--attncheck-static", "-p", "no:cacheprovider", "-rA", ".",
                     cwd=model_repo)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "FAILED unscaled.py::UnscaledAttention" in run.stdout
    assert "PASSED good.py::MultiHeadSelfAttention" in run.stdout
    assert "unscaled.py:19:15: ATT201 scores" in run.stdout  # the findings are the failure's text
    assert "1 failed, 2 passed" in run.stdout  # the repository's own test ran as well


def test_pytest_without_attncheck_is_unchanged_and_imports_nothing_more(model_repo):
    run = pytest_run("-X", "importtime", "-m", "pytest", "-p", "no:cacheprovider", "--trace-config", "-q", ".",
                     cwd=model_repo)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
    assert "PLUGIN registered: <module 'attncheck.pytest_plugin'" in run.stdout  # the entry point is installed...
    imported = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}
    assert not {name for name in imported if name.startswith(("attncheck.api", "attncheck.pipeline", "libcst",
                                                                "torch", "rich"))}  # ...and costs nothing
