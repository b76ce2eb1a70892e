"""Exit codes: 0 clean, 1 problems, 2 usage/config/internal error; never a traceback."""

from __future__ import annotations

import sys
import types

import pytest

from attncheck import cli
from attncheck.findings import Check, Finding, Severity, Span, Target, TargetResult
from attncheck.static.engine import FileResult

BUG = "import torch\nx = torch.sqrt(64)\n"


def run_main(monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["attncheck", *argv])
    with pytest.raises(SystemExit) as done:
        cli.main(list(argv))
    out, err = capsys.readouterr()
    return done.value.code, out, err


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bug.py").write_text(BUG)
    (tmp_path / "ok.py").write_text("import math\nx = math.sqrt(64)\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    return tmp_path


@pytest.mark.parametrize(("argv", "code"), [
    (["--static-only", "ok.py"], 0),
    (["--static-only", "bug.py"], 1),
    (["--static-only", "--exit-zero", "bug.py"], 0),
    (["--static-only", "--ignore", "ATT204", "bug.py"], 0),
    (["--static-only", "broken.py"], 1),  # a file that cannot be checked fails the run
    (["--static-only", "--exit-zero", "broken.py"], 0),
    (["--static-only", "missing.py"], 2),
    (["--static-only", "--select", "BOGUS", "ok.py"], 2),
    (["--static-only", "--format", "yaml", "ok.py"], 2),
    (["--static-only", "--fix", "--diff", "ok.py"], 2),
    (["--static-only", "--jobs", "0", "ok.py"], 2),
    (["--static-only"], 2),
    (["rule", "ATT000"], 2),
    (["rules"], 0),
    (["--version"], 0),
])
def test_exit_code(files, monkeypatch, capsys, argv, code):
    status, out, err = run_main(monkeypatch, capsys, *argv)
    assert status == code, out + err
    assert "Traceback" not in out + err


def test_bad_config_file_exits_2_with_one_line(files, monkeypatch, capsys):
    (files / "pyproject.toml").write_text("[tool.attncheck]\nselect = ['ATT2'\n")
    status, _, err = run_main(monkeypatch, capsys, "--static-only", "ok.py")
    assert status == 2
    assert "invalid TOML" in err and len(err.strip().splitlines()) == 1


def test_internal_error_is_one_line_and_asks_for_a_report(files, monkeypatch, capsys):
    from attncheck import pipeline

    def explode(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(pipeline, "run", explode)
    monkeypatch.delenv("ATTNCHECK_DEBUG", raising=False)
    status, _, err = run_main(monkeypatch, capsys, "--static-only", "ok.py")
    assert status == 2
    assert err.startswith("attncheck: internal error: RuntimeError: boom (please report this")
    monkeypatch.setenv("ATTNCHECK_DEBUG", "1")
    with pytest.raises(RuntimeError, match="boom"):
        cli.main(["--static-only", "ok.py"])


def fake_runner(monkeypatch, run_dynamic) -> None:
    module = types.ModuleType("attncheck.dynamic.launch")
    module.run_dynamic = run_dynamic
    monkeypatch.setitem(sys.modules, "attncheck.dynamic.launch", module)


def test_dynamic_stage_is_called_with_options_and_its_results_merged(files, monkeypatch, capsys):
    seen = {}

    def run_dynamic(results: list[FileResult], options):
        seen["paths"] = [r.source.path for r in results]
        seen["options"] = options
        target = Target(path="bug.py", name="Attn", line=1, kinds=("mha",), is_class=True)
        finding = Finding("ATT903", Severity.ERROR, "output differs", "bug.py", Span(1), source="dynamic",
                          target="Attn")
        checks = [Check("reference", "failed", "max error 0.4")]
        return [finding], [TargetResult(target, "failed", "", checks)]

    fake_runner(monkeypatch, run_dynamic)
    status, out, _ = run_main(monkeypatch, capsys, "--timeout", "3", "--device", "cpu", "-j", "1", "bug.py")
    assert status == 1
    assert seen["paths"] == ["bug.py"]
    assert (seen["options"].timeout, seen["options"].device, seen["options"].jobs) == (3.0, "cpu", 1)
    assert "bug.py:1:1: ATT903 [error] output differs (dynamic)" in out
    assert "max error 0.4" in out and "1 target: 1 failed" in out


def test_missing_dynamic_stage_is_said_once_and_targets_skipped(files, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "attncheck.dynamic.launch", None)  # import fails like a missing torch
    status, _, err = run_main(monkeypatch, capsys, "bug.py", "ok.py")
    assert status == 1
    assert err.count("dynamic checks skipped") == 1 and "pip install 'attncheck[dynamic]'" in err


def test_crash_in_the_dynamic_stage_keeps_static_results(files, monkeypatch, capsys):
    def run_dynamic(results, options):
        raise ValueError("probe exploded")

    fake_runner(monkeypatch, run_dynamic)
    monkeypatch.delenv("ATTNCHECK_DEBUG", raising=False)
    status, out, err = run_main(monkeypatch, capsys, "bug.py")
    assert status == 1
    assert "ATT204" in out and "dynamic stage failed: ValueError: probe exploded" in err
