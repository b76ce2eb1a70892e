"""A declaration's variant keys (kv_heads, rope, rope_base) reach the dynamic check: the module is built
with the declared K/V head count and held to it, and its rotary embedding is read against the convention
and base asked for."""

from __future__ import annotations

import pytest

from attncheck.dynamic.binding.bind import DeclaredVariant
from attncheck.dynamic.runner import check_file
from attncheck.sources import Source
from attncheck.static.engine import lint
from attncheck.static.rules import all_rules
from tests.dynamic_support import FIXTURES, Options, in_process_child


def _check(relative: str, target: str, declaration: dict):
    path = FIXTURES / relative
    result = lint(Source(str(path), path.read_text()), all_rules())
    _, results = check_file(result, Options(targets={target: declaration}), in_process_child)
    return {c.name: c for c in next(r for r in results if r.target.name == target).checks}


def test_only_a_declaration_with_variant_keys_declares_a_variant():
    assert DeclaredVariant.of({"init": {"d_model": 32}, "causal": True}) is None
    assert DeclaredVariant.of({"kv_heads": 1, "rope": "half"}) == DeclaredVariant(1, "half", None)


@pytest.mark.parametrize(("relative", "target", "status", "words"), [
    ("correct/gqa_repeat_kv.py", "LlamaStyleAttention", "passed", "query head h uses KV head h // 2"),
    ("buggy/gqa_tiled.py", "TiledGQA", "failed", "moves query heads 1, 3"),
    ("correct/dyn_self_attention.py", "MultiHeadSelfAttention", "failed",
     "uses 4 K/V heads for 4 query heads; 2 are asked"),
])
def test_a_declared_kv_head_count_is_built_and_held_to(relative, target, status, words):
    check = _check(relative, target, {"kv_heads": 2})["gqa-grouping"]
    assert check.status == status and words in check.detail


def test_a_declared_single_kv_head_builds_multi_query_attention():
    checks = _check("correct/gqa_repeat_kv.py", "LlamaStyleAttention", {"kv_heads": 1})
    assert checks["reference"].status == "passed"
    assert checks["gqa-grouping"].status == "passed" and "h // 4" in checks["gqa-grouping"].detail


@pytest.mark.parametrize(("declaration", "status", "words"), [
    ({"rope": "half"}, "passed", "half-split (rotate_half, HF LLaMA), base 10000, as asked"),
    ({"rope": "interleaved"}, "failed", "rotates with half-split (rotate_half, HF LLaMA), base 10000; interleaved"),
])
def test_a_declared_rotary_convention_is_read_against_the_module(declaration, status, words):
    check = _check("correct/rope_hf.py", "LlamaRotaryAttention", declaration)["rope-declared"]
    assert check.status == status and words in check.detail


def test_a_declared_rotary_base_is_the_one_the_reference_rotates_with():
    checks = _check("correct/rope_hf.py", "LlamaRotaryAttention", {"rope": "half", "rope_base": 500000.0})
    assert checks["reference"].status == "failed"  # the module rotates with base 10000
    assert checks["rope-declared"].status == "skipped"


def test_a_module_without_rotary_embedding_fails_a_rope_declaration():
    check = _check("correct/dyn_self_attention.py", "MultiHeadSelfAttention", {"rope": "half"})["rope-declared"]
    assert check.status == "failed" and "applies no rotary embedding" in check.detail
