"""The dynamic-rope probe: declared dynamic NTK scaling is judged on positions past max_position_embeddings.

The harness's configs hold max_position_embeddings 16: on the plain run's 7 tokens dynamic scaling
never engages, so a module that never applies it passes every other check.
"""

from __future__ import annotations

from tests.dynamic_support import FIXTURES, checked_target


def test_dynamic_scaling_past_the_maximum_passes():
    findings, result, checks = checked_target(FIXTURES / "correct" / "variant_rope_dynamic_ntk.py")
    assert (result.status, findings) == ("passed", [])
    check = checks["dynamic-rope"]
    assert check.status == "passed"
    assert check.detail.startswith(
        "positions 0..23, past max_position_embeddings = 16: closest reading declared base 10000 with dynamic scaling"
    )


def test_dynamic_scaling_never_applied_is_att402():
    findings, _, checks = checked_target(FIXTURES / "buggy" / "variant_rope_dynamic_ntk_never_applied_att402.py")
    assert checks["reference"].status == "passed"  # exact on 7 tokens
    assert checks["dynamic-rope"].status == "failed"
    assert [f.code for f in findings] == ["ATT402"]
    assert findings[0].message.startswith("dynamic NTK scaling is declared but never applied: on 24 tokens")


def test_a_maximum_the_run_does_not_pass_is_skipped_with_why(tmp_path):
    text = (FIXTURES / "correct" / "variant_rope_dynamic_ntk.py").read_text()
    path = tmp_path / "user_attention.py"
    longer = "self.config = config\n        config.max_position_embeddings = 64\n"
    path.write_text(text.replace("self.config = config\n", longer))
    findings, result, checks = checked_target(path)
    assert (result.status, findings) == ("passed", [])
    assert checks["dynamic-rope"].status == "skipped"
    assert checks["dynamic-rope"].detail == "max_position_embeddings 64 leaves no position past it in 24 tokens"


def test_other_rope_scaling_no_check():
    _, result, checks = checked_target(FIXTURES / "correct" / "variant_rope_llama3_hf.py")
    assert result.status == "passed" and "dynamic-rope" not in checks
