"""float16 and bfloat16 runs (the flash-attn rule), the float16 mask overflow, and the device plumbing."""

from __future__ import annotations

import textwrap

import pytest
import torch

from attncheck.dynamic.runner import check_file
from tests.dynamic_support import FIXTURES, Options, file_result, in_process_child

DTYPES = ("float16", "bfloat16")


def _checks(result) -> dict:
    return {c.name: c for c in result.checks}


def _module(tmp_path, body: str):
    path = tmp_path / "lowprec_attention.py"
    path.write_text(textwrap.dedent(body))
    return path


@pytest.mark.parametrize("name", ["dyn_self_attention.py", "dyn_cross_attention.py", "dyn_hf_gqa.py"])
def test_correct_modules_pass_in_float16_and_bfloat16(name):
    findings, results = check_file(file_result(FIXTURES / "correct" / name), Options(), in_process_child)
    checks = _checks(results[0])
    for dtype in DTYPES:
        check = checks[f"low-precision-{dtype}"]
        assert check.status == "passed", check.detail
        assert f"{dtype} error" in check.detail and "within" in check.detail
    assert findings == []


def test_masked_fill_minus_1e9_overflows_float16_as_att302():
    findings, results = check_file(
        file_result(FIXTURES / "buggy" / "mask_fill_overflow.py"), Options(), in_process_child
    )
    (finding,) = [f for f in findings if f.code == "ATT302"]
    assert "c10::Half without overflow" in finding.message and "torch.finfo" in finding.message
    checks = _checks(results[0])
    assert checks["low-precision-float16"].status == "failed"
    assert checks["low-precision-bfloat16"].status == "passed"  # -1e9 fits bfloat16's range
    assert checks["reference"].status == "passed"


LOSSY = """
    import math
    import torch
    from torch import nn

    class LossyAttention(nn.Module):
        \"\"\"Correct in float64 and float32; rounds its scores to 3 bits of mantissa in float16.\"\"\"

        def __init__(self, d_model, num_heads):
            super().__init__()
            self.h, self.dk = num_heads, d_model // num_heads
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.out = nn.Linear(d_model, d_model)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = (t.view(b, s, self.h, self.dk).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
            scores = q @ k.transpose(-1, -2) / math.sqrt(self.dk)
            if scores.dtype == torch.float16:
                scores = (scores * 8).round() / 8
            out = torch.softmax(scores, dim=-1) @ v
            return self.out(out.transpose(1, 2).reshape(b, s, d))
"""


def test_accuracy_lost_beyond_the_naive_low_precision_attention_is_att909(tmp_path):
    path = _module(tmp_path, LOSSY)
    findings, results = check_file(file_result(path), Options(), in_process_child)
    (finding,) = [f for f in findings if f.code == "ATT909"]
    assert "float16" in finding.message and "naive float16 attention" in finding.message
    checks = _checks(results[0])
    assert checks["reference"].status == "passed"
    assert checks["low-precision-bfloat16"].status == "passed"


def test_auto_device_without_a_gpu_runs_on_the_cpu_and_says_so():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the CUDA test covers it")
    _, results = check_file(file_result(FIXTURES / "correct" / "dyn_self_attention.py"), Options(), in_process_child)
    assert results[0].device == "cpu"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_device_runs_the_checks_on_the_gpu():
    for device in ("auto", "cuda"):
        findings, results = check_file(
            file_result(FIXTURES / "correct" / "dyn_self_attention.py"), Options(device=device), in_process_child
        )
        assert results[0].device == "cuda" and results[0].status == "passed", results[0].checks
        assert findings == []


@pytest.mark.sandbox
def test_diagnosis_through_the_real_sandbox():
    from attncheck.dynamic.runner import sandbox_child

    options = Options()
    findings, _ = check_file(
        file_result(FIXTURES / "buggy" / "mask_fill_overflow.py"), options, sandbox_child(options)
    )
    assert {f.code for f in findings} == {"ATT302"}
    findings, _ = check_file(file_result(FIXTURES / "buggy" / "scale_seq_len.py"), options, sandbox_child(options))
    assert [f.code for f in findings] == ["ATT201"] and "sqrt(seq_len)" in findings[0].message
