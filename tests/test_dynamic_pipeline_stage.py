"""The dynamic stage inside the whole run: merge with the static findings, declarations from
pyproject.toml, and the --jobs / --device / --timeout options.

The merge tests run the real pipeline with the in-process child (fast); the declaration and
option tests go through ``python -m attncheck`` and the real sandbox.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from attncheck import pipeline
from attncheck.config import Settings
from attncheck.discovery import Candidate
from attncheck.dynamic import launch, runner
from attncheck.findings import Severity, TargetResult
from attncheck.merge import UNSEEN_NOTE
from tests.dynamic_support import FIXTURES, file_result, in_process_child

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def in_process(monkeypatch):
    monkeypatch.setattr(
        launch, "run_dynamic", lambda results, options: runner.run_dynamic(results, options, in_process_child)
    )


def _run(*paths: Path) -> pipeline.Outcome:
    items = [Candidate(p, str(p), True) for p in paths]
    outcome, _ = pipeline.run(items, Settings(root=ROOT), static_only=False, jobs=1)
    return outcome


def test_same_code_seen_both_ways_is_one_finding_from_both(in_process):
    outcome = _run(FIXTURES / "buggy" / "sqrt_of_dimension.py", FIXTURES / "buggy" / "dropout_unused.py")
    att204 = [f for f in outcome.findings if f.code == "ATT204"]
    assert len(att204) == 1 and att204[0].source == "both"
    assert att204[0].line == 19  # the static location: the torch.sqrt call
    assert any(e.startswith("dynamic: ") for e in att204[0].evidence)
    dropout = [f for f in outcome.findings if f.code == "ATT103"]
    assert [(f.target, f.source) for f in dropout] == [
        ("NoDropoutAttention", "both"),
        ("DiscardedDropoutAttention", "both"),
    ]


def test_static_finding_a_passing_check_could_not_see_keeps_its_severity(in_process):
    """No Q/K/V projection: the reference is built the same way and matches, so the passing check
    proves nothing about ATT101: it keeps its severity, never info (issue 16)."""
    outcome = _run(FIXTURES / "buggy" / "merge_att101_no_projection.py")
    (finding,) = outcome.findings
    assert [t.status for t in outcome.targets] == ["passed"]
    assert (finding.code, finding.severity, finding.source) == ("ATT101", Severity.WARNING, "static")
    assert finding.evidence[-1] == UNSEEN_NOTE
    assert pipeline.has_problems(outcome)


def test_a_mask_convention_stated_in_chinese_is_judged_both_ways(in_process):
    """The comment says 1 = masked (seed 004, in Chinese) and the code masks the zeros: the mask
    probes expect the convention the comment states, so the mistake is seen from both sides."""
    outcome = _run(FIXTURES / "buggy" / "mask_polarity_comment.py")
    (finding,) = outcome.findings
    assert [t.status for t in outcome.targets] == ["failed"]
    assert (finding.code, finding.severity, finding.source) == ("ATT304", Severity.ERROR, "both")


def test_a_dynamic_mutant_does_not_raise_a_static_by_design_verdict(in_process):
    # T5 leaves its scores unscaled on purpose: the static pass says so at warning, and the
    # dynamic no-scale mutant that reproduces the output confirms it rather than making it an error.
    outcome = _run(FIXTURES / "buggy" / "t5_unscaled_documented.py")
    (finding,) = [f for f in outcome.findings if f.code == "ATT201"]
    assert (finding.source, finding.severity) == ("both", Severity.WARNING)


def test_t5_relative_bias_unscaled_by_design_passes_and_its_warning_becomes_info(in_process):
    # the static "by design" verdict makes scale 1 the declared one; with the bucketed bias the
    # reference matches, so nothing is left at warning or above
    outcome = _run(FIXTURES / "buggy" / "t5_relative_bias_by_design.py")
    assert [t.status for t in outcome.targets] == ["passed"]
    (finding,) = outcome.findings
    assert (finding.code, finding.severity) == ("ATT201", Severity.INFO)
    assert not pipeline.has_problems(outcome)


def test_dynamic_only_finding_is_added_at_the_target(in_process):
    outcome = _run(FIXTURES / "seeds" / "seed002_self_attention.py")
    nan = [f for f in outcome.findings if f.code == "ATT303"]
    assert {f.source for f in nan} == {"both"}  # the static rule marks the -inf fill too


def attncheck(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # run from tmp_path, import this checkout
    return subprocess.run(
        [sys.executable, "-m", "attncheck", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


ODD = '''
import math
import torch
from torch import nn


class OddAttention(nn.Module):
    """Self-attention with names no binder guesses."""

    def __init__(self, features, splits):
        super().__init__()
        self.splits = splits
        self.qkv = nn.Linear(features, 3 * features)
        self.out = nn.Linear(features, features)

    def forward(self, inp, blocked=None):
        b, s, d = inp.shape
        q, k, v = (t.view(b, s, self.splits, -1).transpose(1, 2) for t in self.qkv(inp).chunk(3, -1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.splits)
        future = torch.ones(s, s, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        if blocked is not None:
            scores = scores.masked_fill(blocked[:, None, None, :], torch.finfo(scores.dtype).min)
        w = torch.softmax(scores, -1)
        return self.out((w @ v).transpose(1, 2).reshape(b, s, d))
'''

DECLARATION = """
[tool.attncheck.targets.OddAttention]
init = {features = 48, splits = 6}
d_model = 48
heads = 6
forward = ["x", "mask"]
mask = "blocked"
causal = true
"""


@pytest.mark.sandbox
def test_declaration_in_pyproject_binds_a_target_through_the_cli(tmp_path):
    (tmp_path / "odd.py").write_text(ODD)
    undeclared = attncheck("odd.py", "--format", "json", cwd=tmp_path)
    (target,) = json.loads(undeclared.stdout)["targets"]
    assert target["status"] == "skipped"
    assert "[tool.attncheck.targets.OddAttention]" in target["reason"]
    (tmp_path / "pyproject.toml").write_text(DECLARATION)
    declared = attncheck("odd.py", "--format", "json", "--device", "cpu", "--timeout", "20", cwd=tmp_path)
    report = json.loads(declared.stdout)
    (target,) = report["targets"]
    checks = {c["name"]: c for c in target["checks"]}
    assert target["status"] == "passed", [(c["name"], c["detail"]) for c in target["checks"]]
    assert declared.returncode == 0
    assert checks["forward"]["detail"] == "bound with declared in pyproject.toml"
    assert "declared in pyproject.toml" in checks["causal"]["detail"]
    assert "documented as bool, True = masked" in checks["mask-convention"]["detail"]
    assert target["device"] == "cpu"


def test_a_mistyped_declaration_key_is_a_clear_skip():
    from attncheck.dynamic.binding.bind import bind
    from tests.dynamic_support import file_result

    target = file_result(FIXTURES / "correct" / "dyn_self_attention.py").targets[0]
    binding = bind(target, {"forwrd": ["x"]})
    assert not binding.ok and "unknown key 'forwrd'" in binding.reason


@pytest.mark.sandbox
def test_jobs_run_files_in_parallel_and_device_is_reported():
    files = [str(FIXTURES / "correct" / name) for name in ("dyn_self_attention.py", "dyn_cross_attention.py")]
    ran = attncheck(*files, "--format", "json", "--device", "cpu", "--jobs", "2", "--timeout", "20")
    report = json.loads(ran.stdout)
    assert ran.returncode == 0, ran.stderr
    assert [t["status"] for t in report["targets"]] == ["passed", "passed"]
    assert {t["device"] for t in report["targets"]} == {"cpu"}


def test_option_values_are_checked():
    ran = attncheck(str(FIXTURES / "correct" / "dyn_self_attention.py"), "--device", "tpu")
    assert ran.returncode == 2 and "tpu" in ran.stderr and "Traceback" not in ran.stderr
    ran = attncheck(str(FIXTURES / "correct" / "dyn_self_attention.py"), "--timeout", "-1")
    assert ran.returncode == 2 and "positive number of seconds" in ran.stderr


@pytest.mark.parametrize(("device", "warned"), [("cuda", True), ("auto", False), ("cpu", False)])
def test_asking_for_cuda_without_a_gpu_says_the_checks_ran_on_the_cpu(monkeypatch, device, warned):
    result = file_result(FIXTURES / "correct" / "dyn_self_attention.py")
    ran_on_cpu = [TargetResult(t, "passed", device="cpu") for t in result.targets]
    monkeypatch.setattr(launch, "run_dynamic", lambda results, options: ([], ran_on_cpu))
    warnings: list[str] = []
    pipeline._run_dynamic([result], replace(Settings(), device=device), 1, warnings.append)
    assert any("no CUDA GPU" in w for w in warnings) == warned
