"""The KV-cache consistency probe: the cache path of a module must agree with its prompt path.

Variants of the correct cached GQA fixture, each with one mistake on the cache path, run
through the real static pass and the in-process child.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from attncheck.dynamic.binding.bind import cache_param
from attncheck.dynamic.inside import kv_cache
from attncheck.dynamic.runner import check_file
from attncheck.findings import Check, Finding
from attncheck.static.result import FileResult
from tests.dynamic_support import FIXTURES, Options, file_result, in_process_child
from tests.test_dynamic_binding import target

CORRECT = FIXTURES / "correct" / "gqa_kv_cache.py"
MASK = "visible = torch.ones(s, total, dtype=torch.bool, device=x.device).tril(diagonal=total - s)"


def _run(result: FileResult) -> tuple[Check, list[Finding]]:
    findings, results = check_file(result, Options(device="cpu"), in_process_child)
    (only,) = results
    return next(c for c in only.checks if c.name == "kv-cache"), findings


def _variant(tmp_path: Path, old: str, new: str) -> tuple[Check, list[Finding]]:
    text = CORRECT.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "variant.py"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return _run(file_result(path))


def test_consistent_cache_passes():
    check, findings = _run(file_result(CORRECT))
    assert check.status == "passed", check.detail
    assert "cache of tokens 0..3" in check.detail
    assert findings == []


def test_tiling_on_the_cache_path_only_is_att401():
    check, findings = _run(file_result(FIXTURES / "buggy" / "gqa_mixed.py"))
    assert check.status == "failed"
    (finding,) = [f for f in findings if f.code == "ATT401"]
    assert "cache path tiles" in finding.message and "prompt path groups" in finding.message
    assert "repeat_interleave(2, dim=1)" in finding.message


def test_top_left_causal_mask_with_a_cache_is_att305(tmp_path):
    check, findings = _variant(tmp_path, "tril(diagonal=total - s)", "tril()")
    assert check.status == "failed"
    assert "ATT305" in {f.code for f in findings}, [(f.code, f.message) for f in findings]


def test_causal_mask_dropped_on_the_cache_path_is_att906(tmp_path):
    dropped = MASK.replace("visible =", "visible = (past_key_value is not None) |")
    check, findings = _variant(tmp_path, MASK, dropped)
    assert check.status == "failed"
    assert "ATT906" in {f.code for f in findings}, [(f.code, f.message) for f in findings]


def test_unexplained_cache_difference_is_a_reference_mismatch(tmp_path):
    check, findings = _variant(tmp_path, "(past_key_value[1], v)", "(past_key_value[0], v)")
    assert check.status == "failed"
    (finding,) = findings
    assert finding.code == "ATT903" and "cache path computes attention differently" in finding.message


def test_a_cache_object_the_module_cannot_take_is_a_skip(tmp_path):
    concatenated = (
        "k = torch.cat((past_key_value[0], k), dim=2)\n            v = torch.cat((past_key_value[1], v), dim=2)"
    )
    check, findings = _variant(tmp_path, concatenated, "k, v = past_key_value.update(k, v, 0)")
    assert check.status == "skipped"
    assert "AttributeError" in check.detail and "other cache formats" in check.detail
    assert findings == []


def test_rotary_targets_are_skipped_with_a_reason():
    result = file_result(CORRECT)
    rotary = replace(result.targets[0], kinds=(*result.targets[0].kinds, "rope"))
    check, findings = _run(replace(result, targets=[rotary]))
    assert check.status == "skipped" and "rotary" in check.detail
    assert findings == []


@pytest.mark.parametrize(
    ("forward", "expected"),
    [
        ("x, past_key_value=None", "past_key_value"),
        ("hidden_states, layer_past=None, use_cache=False", "layer_past"),
        ("x, mask=None, kv_cache=None", "kv_cache"),
        ("x, cache", None),  # a required cache is not ours to fill
        ("x, mask=None", None),
    ],
)
def test_cache_parameter_detection(forward, expected):
    assert cache_param(target("d_model, num_heads", forward)) == expected


def _seen(*layers: tuple[str, int]) -> kv_cache.Seen:
    return [(name, torch.full((2, 3, width), float(i))) for i, (name, width) in enumerate(layers)]


@pytest.mark.parametrize(
    ("layers", "key", "value"),
    [
        ((("qkv", 32 + 2 * 16),), 0.0, 0.0),  # fused QKV: the columns after q
        ((("q", 32), ("kv", 32)), 1.0, 1.0),  # Q, then a fused KV
        ((("q_proj", 32), ("v_proj", 16), ("k_proj", 16)), 2.0, 1.0),  # names beat call order
        ((("a", 32), ("b", 16), ("c", 16)), 1.0, 2.0),  # no names: Q, K, V in call order
    ],
)
def test_cache_is_cut_from_the_key_and_value_projections(layers, key, value):
    k, v = kv_cache.cut(_seen(*layers), 32, 8)
    assert k.shape == v.shape and k.shape[1] * k.shape[3] == 16 and k.shape[2] == 3
    assert float(k[0, 0, 0, 0]) == key and float(v[0, 0, 0, 0]) == value


@pytest.mark.parametrize(
    ("layers", "message"),
    [((), "no projection read"), ((("qkv", 33),), "not Q, K and V"), ((("q", 32), ("kv", 30)), "into heads")],
)
def test_cache_cut_failures_say_why(layers, message):
    with pytest.raises(kv_cache.CacheBuildError, match=message):
        kv_cache.cut(_seen(*layers), 32, 8)


GPT2_STYLE = '''
import math

import torch
import torch.nn as nn


class FusedCachedAttention(nn.Module):
    """Multi-head attention with one fused c_attn, GPT-2's legacy layer_past, returning (out, present)."""

    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.n_head, self.head_dim = n_head, n_embd // n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x, layer_past=None):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.n_head, self.head_dim).transpose(1, 2) for t in self.c_attn(x).split(d, dim=2))
        if layer_past is not None:
            k = torch.cat((layer_past[0], k), dim=-2)
            v = torch.cat((layer_past[1], v), dim=-2)
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.head_dim), dim=-1)
        return self.c_proj((weights @ v).transpose(1, 2).reshape(b, s, d)), (k, v)
'''


def test_fused_multi_head_cache_of_a_non_causal_module_passes(tmp_path):
    path = tmp_path / "gpt2_style.py"
    path.write_text(GPT2_STYLE, encoding="utf-8")
    check, findings = _run(file_result(path))
    assert check.status == "passed", check.detail
    assert findings == []
