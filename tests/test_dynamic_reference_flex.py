"""Modules that call flex_attention, eager or compiled: checked in float64 without gradients.

Eager flex has no backward on CPU, so its forwards run on inputs without grad and the gradient
check is skipped with why. ``torch.compile(flex_attention)`` takes no float64 on CPU (Inductor's
lowering accepts float32, float16 and bfloat16 only) and compiles for tens of seconds a shape, so
the child runs every forward under ``torch.compiler.set_stance("force_eager")``: the same score
and mask functions, in float64, and the report says the compiled path was not taken.
"""

from __future__ import annotations

import pytest

from tests.dynamic_support import FIXTURES, checked_target

pytest.importorskip("torch.nn.attention.flex_attention")


def test_a_compiled_flex_attention_runs_eagerly_in_float64_and_passes():
    findings, result, checks = checked_target(FIXTURES / "correct" / "variant_flex_compiled_sliding_window.py")
    assert (result.status, findings) == ("passed", [])
    assert "its torch.compile'd callables run eagerly" in checks["forward"].detail
    assert checks["reference"].detail.startswith("self-attention: max error")
    assert checks["gradients"].status == "skipped"
    assert "flex_attention, which has no backward on CPU" in checks["gradients"].detail
    assert "closest reading sliding window 7 (W+1 keys)" in checks["window-length"].detail


def test_an_eager_flex_attention_is_not_said_to_run_eagerly():
    findings, result, checks = checked_target(FIXTURES / "correct" / "variant_flex_softcap.py")
    assert (result.status, findings) == ("passed", [])
    assert "torch.compile" not in checks["forward"].detail
    assert checks["gradients"].status == "skipped"


def test_a_mistake_in_a_compiled_flex_mask_mod_is_named():
    findings, result, _ = checked_target(FIXTURES / "buggy" / "variant_flex_compiled_hides_diagonal_att305.py")
    assert result.status == "failed"
    assert [f.code for f in findings] == ["ATT305"]
    assert "causal-hides-self" in findings[0].message
