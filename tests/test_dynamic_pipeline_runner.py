"""run_dynamic's bookkeeping: crashes cost one target, import failures every target, bad bindings skip."""

from __future__ import annotations

import ast
import threading

from attncheck.dynamic.runner import check_file, run_dynamic
from tests.dynamic_support import FIXTURES, Options, Outcome, file_result, in_process_child, write_module

TWO = FIXTURES / "correct" / "dyn_self_attention.py"


def test_a_dying_child_marks_its_target_and_a_fresh_child_runs_the_rest():
    result = file_result(TWO)
    result.targets = [result.targets[0], result.targets[0], result.targets[0]]
    calls = []

    def dies_on_second(path, request, tensors):
        calls.append([t["id"] for t in request["targets"]])
        outcome = in_process_child(path, request, tensors)
        if len(calls) == 1:
            return Outcome("timeout", "exceeded 20 s", outcome.replies[:1])
        return outcome

    findings, results = check_file(result, Options(), dies_on_second)
    assert calls == [["0", "1", "2"], ["2"]]
    assert [r.status for r in results] == ["passed", "error", "passed"]
    assert results[1].reason == "timeout: exceeded 20 s"
    assert findings == []


def test_import_failure_errors_every_target(tmp_path):
    path = write_module(tmp_path, "import torch\nraise RuntimeError('no GPU here')\nclass Attention: pass\n")
    result = file_result(path)
    result.targets = file_result(TWO).targets
    _, results = check_file(result, Options(), in_process_child)
    assert [r.status for r in results] == ["error"]
    assert "RuntimeError: no GPU here" in results[0].reason


def test_crash_inside_forward_is_att901_with_the_line(tmp_path):
    path = write_module(
        tmp_path,
        """
        import torch
        from torch import nn

        class CrashingAttention(nn.Module):
            def __init__(self, d_model, num_heads):
                super().__init__()
                self.proj = nn.Linear(d_model, d_model)

            def forward(self, x):
                return self.proj(x) / torch.nonexistent(64)
        """,
    )
    findings, results = check_file(file_result(path), Options(), in_process_child)
    assert results[0].status == "failed"
    assert [f.code for f in findings] == ["ATT901"]
    assert "AttributeError" in findings[0].message and "(line 11)" in findings[0].message
    assert findings[0].span.line == 11  # at the line that raised, not at the class (line 5)


def test_unbindable_constructor_is_skipped_with_a_hint_and_declaration_fixes_it(tmp_path):
    path = write_module(
        tmp_path,
        """
        import math
        import torch
        from torch import nn

        class OddAttention(nn.Module):
            def __init__(self, width, n):
                super().__init__()
                self.n = n
                self.qkv = nn.Linear(width, 3 * width)
                self.out = nn.Linear(width, width)

            def forward(self, x):
                b, s, d = x.shape
                q, k, v = (t.view(b, s, self.n, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
                w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // self.n), -1)
                return self.out((w @ v).transpose(1, 2).reshape(b, s, d))
        """,
    )
    _, results = check_file(file_result(path), Options(), in_process_child)
    assert results[0].status == "skipped"
    assert "[tool.attncheck.targets.OddAttention]" in results[0].reason
    declared = Options(targets={"OddAttention": {"init": {"width": 32, "n": 4}, "forward": ["x"]}})
    _, results = check_file(file_result(path), declared, in_process_child)
    assert results[0].status == "passed", [(c.name, c.detail) for c in results[0].checks]


def test_run_dynamic_collects_files_in_order():
    buggy = file_result(FIXTURES / "buggy" / "dyn_wrong_scale.py")
    findings, results = run_dynamic([file_result(TWO), buggy], Options(jobs=2), child=in_process_child)
    assert [r.target.name for r in results] == ["MultiHeadSelfAttention", "WrongScaleAttention"]
    assert [f.code for f in findings] == ["ATT201"]
    assert "tolerance 1e-05" in findings[0].message and findings[0].target == "WrongScaleAttention"
    assert results[0].device == "cpu"


def test_run_dynamic_parses_in_the_calling_thread_only(monkeypatch):
    """CPython 3.11's ast.parse is not thread-safe (gh-106905: two threads parsing at once raise
    "SystemError: AST constructor recursion depth mismatch"), which made the test above flaky: every
    reading of a file's text happens before the pool of jobs starts."""
    threads = []
    parse = ast.parse

    def recording_parse(*args, **kwargs):
        threads.append(threading.current_thread())
        return parse(*args, **kwargs)

    monkeypatch.setattr(ast, "parse", recording_parse)
    buggy = file_result(FIXTURES / "buggy" / "dyn_wrong_scale.py")
    run_dynamic([file_result(TWO), buggy], Options(jobs=2), child=in_process_child)
    assert threads and set(threads) == {threading.current_thread()}


def test_a_crash_on_the_gpu_alone_takes_the_cpu_runs_verdict_with_a_device_check():
    """The re-run the CUDA path makes (a CI machine has no GPU, so the first results are marked cuda by
    hand): a target that crashed on cuda and forwards on the CPU takes the CPU verdict, and says why."""
    from dataclasses import replace

    from attncheck.dynamic import codes, runner
    from attncheck.findings import Finding, Severity

    prepared = runner.prepare(file_result(FIXTURES / "correct" / "gqa_sdpa.py"), Options(device="cpu"))
    _, results = runner.run_prepared(prepared, Options(device="cpu"), in_process_child)
    assert [r.status for r in results] == ["passed"]
    crash = Finding(codes.FORWARD_CRASH, Severity.ERROR, "forward raises RuntimeError: device-side assert",
                    results[0].target.path, None, source="dynamic", target=results[0].target.name)
    on_cuda = [replace(results[0], status="failed", device="cuda", checks=[])]
    kept, taken = runner._gpu_only_crashes(prepared, Options(device="cpu"), in_process_child, [crash], on_cuda)
    assert [r.status for r in taken] == ["passed"] and kept == []
    assert taken[0].checks[-1].name == "device" and "device-side assert" in taken[0].checks[-1].detail
