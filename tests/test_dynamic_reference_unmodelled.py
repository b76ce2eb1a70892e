"""The one answer to "why can the reference not model this target": ``unmodelled.reason``."""

from __future__ import annotations

import math

import torch

from attncheck.dynamic.reference import unmodelled

PAGED = {"declared": {"unmodelled": ["paged KV cache (block_table)"]}}
CHANNELS = {"softmax": [{"shape": [2, 4, 8, 8]}]}
TOKENS = {"softmax": [{"shape": [2, 4, 7, 7]}]}


def test_a_declared_construct_is_named_first():
    assert unmodelled.declared({"unmodelled": []}) is None
    why = unmodelled.reason({**PAGED, **CHANNELS}, 7, 7)
    assert why.startswith("the module shows paged KV cache (block_table)")
    assert "not evidence of a mistake" in why


def test_a_softmax_over_another_axis_is_named():
    why = unmodelled.reason(CHANNELS, 7, 7)
    assert "(2, 4, 8, 8) scores, not over (query, key) = (7, 7)" in why
    assert unmodelled.reason(TOKENS, 7, 7) == ""


def test_a_scale_set_on_purpose_is_named_only_when_asked_and_when_it_fits():
    torch.manual_seed(0)
    scores = torch.randn(2, 7, 7, dtype=torch.float64)

    def reference(scale: float) -> torch.Tensor:
        return torch.softmax(scores * scale, dim=-1)

    head_dim = 16
    output = reference(1.0 / math.sqrt(head_dim * 3))  # DeBERTa's 1/sqrt(3 d)
    rescaled = unmodelled.Rescaled(output, [reference], head_dim, 1e-6)
    assert unmodelled.reason(TOKENS, 7, 7) == ""
    why = unmodelled.reason(TOKENS, 7, 7, rescaled)
    assert why.startswith("the output is attention scaled by 0.5774/sqrt(head_dim)") and "1/sqrt(48)" in why
    unrelated = unmodelled.Rescaled(torch.rand(2, 7, 7, dtype=torch.float64), [reference], head_dim, 1e-6)
    assert unmodelled.reason(TOKENS, 7, 7, unrelated) == ""
