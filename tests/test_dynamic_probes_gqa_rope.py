"""Grouped-query attention and rotary embeddings through the dynamic checker: conventions are reported,
mistakes are named (ATT401, ATT402, ATT403, ATT404), standalone rotary functions are fingerprinted."""

from __future__ import annotations

import re

import pytest

from attncheck.dynamic.probes import rope_functions as rope_targets
from attncheck.dynamic.runner import check_file
from attncheck.findings import Severity
from attncheck.sources import Source
from attncheck.static.engine import lint
from attncheck.static.rules import all_rules
from tests.dynamic_support import FIXTURES, Options, in_process_child

SEED004_GQA = {"init": {"d_model": 32, "num_query_heads": 4, "num_kv_heads": 2}}


def _check(relative: str, **declarations):
    path = FIXTURES / relative
    result = lint(Source(str(path), path.read_text()), all_rules())
    findings, results = check_file(result, Options(targets=declarations), in_process_child)
    return findings, {r.target.name: r for r in results}


def _detail(result, name: str) -> str:
    return next(c.detail for c in result.checks if c.name == name)


@pytest.mark.parametrize(
    ("relative", "target", "convention"),
    [
        ("correct/rope_hf.py", "LlamaRotaryAttention", "half-split (rotate_half, HF LLaMA)"),
        ("correct/rope_gptj.py", "GPTJStyleAttention", "interleaved pairs (Meta, GPT-J)"),
        ("correct/rope_meta.py", "MetaAttention", "interleaved pairs (Meta, GPT-J)"),
        ("correct/rope_partial.py", "PartialRotaryAttention", "first 2 dims of each head"),
    ],
)
def test_rotary_modules_pass_and_report_their_convention(relative, target, convention):
    findings, results = _check(relative)
    assert results[target].status == "passed"
    assert convention in _detail(results[target], "reference")
    assert not [f for f in findings if f.target == target]


@pytest.mark.parametrize(
    ("relative", "target", "convention"),
    [
        ("correct/rope_apply_function.py", "apply_rotary_pos_emb", "half-split (rotate_half)"),
        ("correct/rope_gptj.py", "apply_rotary_pos_emb", "interleaved pairs"),
        ("correct/rope_meta.py", "apply_rotary_emb", "interleaved pairs"),
    ],
)
def test_standalone_rotary_functions_are_fingerprinted(relative, target, convention):
    _, results = _check(relative)
    result = results[target]
    assert result.status == "passed"
    detail = _detail(result, "rope-fingerprint")
    assert f"a correct {convention} rotation of 8 of 8 dims, base 10000" in detail
    shift = float(re.search(r"relative-position error (\S+)", detail).group(1))
    assert shift < 1e-6  # complex64 (Meta) rotates in float32


def test_a_rotary_function_that_turns_the_wrong_way_is_att402():
    findings, results = _check("buggy/rope_sign_flip.py")
    assert results["apply_rotary_pos_emb"].status == "failed"
    messages = [f.message for f in findings if f.target == "apply_rotary_pos_emb"]
    assert messages and "turns the wrong way" in messages[0]
    assert {f.code for f in findings if f.target == "apply_rotary_pos_emb"} == {"ATT402"}


@pytest.mark.parametrize(
    ("relative", "code", "words"),
    [
        ("buggy/rope_sign_flip.py", "ATT402", "rope-sign"),
        ("buggy/rope_layout_mismatch.py", "ATT402", "rope-cos-sin-layout"),
        ("buggy/rope_on_value.py", "ATT404", "rope-on-value"),
        ("buggy/gqa_tiled.py", "ATT401", "k.repeat_interleave(2, dim=1) (HF repeat_kv)"),
    ],
)
def test_rotary_and_gqa_module_mistakes_are_named(relative, code, words):
    findings, _ = _check(relative)
    named = [f for f in findings if f.code == code and "behaves exactly like" in f.message]
    assert named and words in named[0].message


def test_seed004_rope_class_is_att403_with_the_shapes():
    findings, _ = _check("seeds/seed004_attention.py", GroupedQueryAttention=SEED004_GQA)
    (rope,) = [f for f in findings if f.target == "RoPEMultiHeadAttention"]
    assert rope.code == "ATT403"
    assert "(8)" in rope.message and "(4)" in rope.message and "head_dim is 8" in rope.message


def test_seed004_gqa_class_matches_the_gqa_reference():
    findings, results = _check("seeds/seed004_attention.py", GroupedQueryAttention=SEED004_GQA)
    gqa = results["GroupedQueryAttention"]
    assert next(c for c in gqa.checks if c.name == "reference").status == "passed"
    # its only finding is the unguarded -inf fill the static pass marks too
    assert {f.code for f in findings if f.target == "GroupedQueryAttention"} == {"ATT303"}
    _, results = _check("correct/gqa_seed004.py", GroupedQueryAttention=SEED004_GQA)
    assert results["GroupedQueryAttention"].status == "passed"


def test_multi_query_attention_with_one_kv_head_passes():
    _, results = _check("correct/gqa_mqa.py", MultiQueryAttention={"init": {"d_model": 32, "num_heads": 4}})
    assert results["MultiQueryAttention"].status == "passed"


def test_only_functions_with_cos_and_sin_or_a_freqs_table_are_rotary_targets():
    path = FIXTURES / "correct" / "rope_hf.py"
    targets = {t.name: t for t in lint(Source(str(path), path.read_text()), all_rules()).targets}
    assert rope_targets.applies(targets["apply_rotary_pos_emb"])
    assert not rope_targets.applies(targets["LlamaRotaryAttention"])
    path = FIXTURES / "correct" / "rope_meta.py"
    targets = {t.name: t for t in lint(Source(str(path), path.read_text()), all_rules()).targets}
    assert rope_targets.applies(targets["apply_rotary_emb"])
    assert not rope_targets.applies(targets["MetaAttention"])


def test_meta_complex_rotation_is_called_with_a_complex_freqs_cis_table():
    _, results = _check("correct/rope_meta.py")
    detail = _detail(results["apply_rotary_emb"], "rope-fingerprint")
    assert "freqs_cis as complex64 (seq, head_dim/2)" in detail


def test_k_conjugated_alone_is_att402_naming_k():
    findings, results = _check("buggy/dyn_rope_meta_conj.py")
    assert results["apply_rotary_emb"].status == "failed"
    messages = [f.message for f in findings if f.target == "apply_rotary_emb" and f.code == "ATT402"]
    assert messages and "k is rotated differently from q" in messages[0] and "wrong way" in messages[0]
    shift = [f for f in findings if f.target == "MetaAttention"]
    assert [f.code for f in shift] == ["ATT402"] and "not relative" in shift[0].message


def test_q_and_k_rotated_by_different_correct_rules_is_att402(tmp_path):
    path = tmp_path / "mixed.py"
    source = (FIXTURES / "correct" / "rope_meta.py").read_text()
    half_split_k = """
    k_cos = torch.cat([freqs_cis.real, freqs_cis.real], dim=-1)  # freqs_cis is (1, s, 1, dh/2) here
    k_sin = torch.cat([freqs_cis.imag, freqs_cis.imag], dim=-1)
    x1, x2 = xk.chunk(2, dim=-1)
    return xq_out.type_as(xq), (xk * k_cos + torch.cat([-x2, x1], dim=-1) * k_sin).type_as(xk)
"""
    source = source.replace("    return xq_out.type_as(xq), xk_out.type_as(xk)\n", half_split_k, 1)
    path.write_text(source)
    result = lint(Source(str(path), source), all_rules())
    findings, _ = check_file(result, Options(), in_process_child)
    messages = [f.message for f in findings if f.target == "apply_rotary_emb"]
    assert messages and "q and k are rotated by different rules" in messages[0]


@pytest.mark.parametrize(
    ("relative", "target", "status", "words"),
    [
        ("correct/gqa_repeat_kv.py", "LlamaStyleAttention", "passed", "query head h uses KV head h // 2"),
        ("correct/gqa_sdpa.py", "SdpaGQA", "passed", "query head h uses KV head h // 2"),
        ("correct/rope_meta.py", "MetaAttention", "passed", "query head h uses KV head h // 2"),
        ("buggy/gqa_tiled.py", "TiledGQA", "failed", "moves query heads 1, 3"),
    ],
)
def test_head_dependency_probe_names_the_grouping(relative, target, status, words):
    _, results = _check(relative)
    check = next(c for c in results[target].checks if c.name == "gqa-grouping")
    assert check.status == status and words in check.detail


def test_consistent_tiling_is_a_warning_and_an_error_once_the_file_loads_weights(tmp_path):
    """The catalogue: K/V tiled the same way everywhere is consistent while no pretrained checkpoint is loaded
    (x-transformers trains its own weights so; pass 3 reported it as an error)."""
    findings, results = _check("buggy/dyn_gqa_tiled_copies_outermost.py")
    assert results["Attention"].status == "failed"
    (tiled,) = [f for f in findings if f.code == "ATT401"]
    assert tiled.severity == Severity.WARNING and "no pretrained checkpoint is loaded" in tiled.message
    text = (FIXTURES / "buggy" / "dyn_gqa_tiled_copies_outermost.py").read_text()
    loading = tmp_path / "tiled_then_loaded.py"
    loading.write_text(text + "\n\ndef load(model, path):\n    model.load_state_dict(torch.load(path))\n")
    result = lint(Source(str(loading), loading.read_text()), all_rules())
    findings, _ = check_file(result, Options(), in_process_child)
    assert [f.severity for f in findings if f.code == "ATT401"] == [Severity.ERROR]
