"""Issue 23, item 4: a layer given the ALiBi bias its model builds (transformers' BLOOM) is run, not skipped.

``BloomAttention.forward(hidden_states, residual, alibi, attention_mask)`` takes the bias the model
builds once with the file's ``build_alibi_tensor`` and a residual it adds back itself. The binding
has the child build ``alibi`` with that helper (as it builds ``freqs_cis`` with a file's helper) and
pass a zero residual; the reference then reads ALiBi with the standard slopes the helper uses."""

from __future__ import annotations

from attncheck.dynamic.binding.bind import bind
from tests.dynamic_support import FIXTURES, checked_target, file_result

CORRECT = FIXTURES / "correct" / "variant_alibi_bloom_model_bias.py"


def _binding(text: str):
    target = next(t for t in file_result(CORRECT).targets if t.name == "BloomAttention")
    return bind(target, None, text)


def test_the_alibi_input_is_built_by_the_files_helper_and_the_residual_is_zero():
    binding = _binding(CORRECT.read_text())
    assert binding.forward.roles == (("hidden_states", "x"),)
    assert dict(binding.forward.generated) == {"residual": "zeros", "alibi": "alibi:build_alibi_tensor"}


def test_without_the_helper_a_model_bias_is_still_skipped_with_why():
    text = CORRECT.read_text().replace("def build_alibi_tensor", "def make_bias")
    binding = _binding(text)
    assert "forward takes alibi: an attention bias its model computes and passes in" in binding.reason


def test_a_bloom_layer_given_its_models_alibi_passes_in_its_own_fused_layout():
    findings, result, checks = checked_target(CORRECT)
    assert (result.status, findings) == ("passed", [])
    assert "declared variant: ALiBi (post-scale)" in checks["reference"].detail
    assert "fused per head" in checks["reference"].detail
    assert checks["permutation-equivariance"].status == "skipped"
