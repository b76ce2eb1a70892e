"""Every dynamic fixture through the whole checker, in process: correct ones pass, buggy ones are named."""

from __future__ import annotations

import pytest

from attncheck.dynamic.runner import check_file
from tests.dynamic_support import FIXTURES, Options, expected_codes, file_result, in_process_child

CORRECT = sorted((FIXTURES / "correct").glob("dyn_*.py"))
BUGGY = sorted((FIXTURES / "buggy").glob("dyn_*.py"))


@pytest.mark.parametrize("path", CORRECT, ids=lambda p: p.stem)
def test_correct_fixture_passes_every_check(path):
    findings, results = check_file(file_result(path), Options(), in_process_child)
    assert results, "the fixture has no target"
    for result in results:
        failed = [(c.name, c.detail) for c in result.checks if c.status in ("failed", "error")]
        assert result.status == "passed", (result.reason, failed)
        assert {c.name for c in result.checks} >= {
            "forward",
            "output-shape",
            "reference",
            "batch-independence",
        }
    assert findings == []


@pytest.mark.parametrize("path", BUGGY, ids=lambda p: p.stem)
def test_buggy_fixture_reports_its_codes(path):
    findings, results = check_file(file_result(path), Options(), in_process_child)
    expected = expected_codes(path)
    assert expected, "buggy fixture without a '# dynamic:' header"
    assert expected <= {f.code for f in findings}
    assert all(r.status == "failed" for r in results)
    target_lines = {r.target.line for r in results}
    for finding in findings:
        assert finding.source == "dynamic"
        assert finding.span.line in target_lines
        assert any(char.isdigit() for char in finding.message) or finding.code in ("ATT303", "ATT907")


def test_weight_mapping_is_reported_for_fused_and_conv1d_layers():
    details = {}
    for name in ("dyn_fused_qkv.py", "dyn_gpt2_conv1d.py", "dyn_hf_gqa.py"):
        _, results = check_file(file_result(FIXTURES / "correct" / name), Options(), in_process_child)
        details[name] = next(c.detail for c in results[0].checks if c.name == "reference")
    assert "QKV=qkv (fused, split 32/32/32), O=proj" in details["dyn_fused_qkv.py"]
    assert "QKV=c_attn (fused" in details["dyn_gpt2_conv1d.py"]
    assert "causal: top-left" in details["dyn_gpt2_conv1d.py"]
    assert "Q=q_proj, K=k_proj, V=v_proj, O=o_proj" in details["dyn_hf_gqa.py"]


def test_mask_convention_and_fully_masked_rows_are_described():
    _, results = check_file(
        file_result(FIXTURES / "correct" / "dyn_cross_attention.py"), Options(), in_process_child
    )
    checks = {c.name: c for c in results[0].checks}
    assert "True = masked" in checks["mask-convention"].detail
    assert "documented as bool, True = masked" in checks["mask-convention"].detail
    assert checks["fully-masked-rows"].status == "passed"
    assert checks["query-independence"].status == "passed"
    _, results = check_file(
        file_result(FIXTURES / "correct" / "dyn_sdpa_function.py"), Options(), in_process_child
    )
    checks = {c.name: c for c in results[0].checks}
    assert checks["weights-sum"].status == "passed"
    assert "0 (like SDPA)" not in checks["fully-masked-rows"].detail  # finfo.min fill gives mean(V)


def test_same_seed_gives_same_results():
    path = FIXTURES / "buggy" / "dyn_wrong_scale.py"
    first = check_file(file_result(path), Options(), in_process_child)
    second = check_file(file_result(path), Options(), in_process_child)
    assert [f.message for f in first[0]] == [f.message for f in second[0]]
