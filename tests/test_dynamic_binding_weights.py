"""Which recorded layers can be Q, K, V and O: only assignments whose K/V width groups the query
heads (a module that returns ``self.to_out(x)`` records its output projection as a reader of x,
and pairing it with the fused qkv layer gave 6 KV heads for 4 query heads: an einsum error in the
judge instead of a verdict)."""

from __future__ import annotations

import torch

from attncheck.dynamic.binding.weights import Layer, assignments
from attncheck.dynamic.reference.mha import Linear


def _layer(name: str, out_features: int, in_features: int = 32) -> Layer:
    return Layer(name, "x", Linear(torch.randn(out_features, in_features, dtype=torch.float64), None))


def test_no_assignment_has_kv_heads_that_do_not_group_the_query_heads() -> None:
    found = assignments([_layer("to_qkv", 96), _layer("to_out", 32)], d_model=32, heads=4)
    assert all(4 % a.kv_heads == 0 for a in found)
    assert [a.description for a in found] == ["no Q/K/V projection found, no output projection"]


def test_a_fused_kv_of_grouped_width_is_kept() -> None:
    found = assignments([_layer("q_proj", 32), _layer("kv_proj", 32)], d_model=32, heads=4)
    # both layers are as wide as the model: either may be Q (the reference decides), each with 2 KV heads
    assert [(a.kv_heads, a.description.split(",")[0]) for a in found] == [(2, "Q=q_proj"), (2, "Q=kv_proj")]


def test_projections_that_all_read_the_query_are_assigned_as_in_self_attention():
    """Cross-attention whose K and V read the query input (ATT101, kv-from-query): the projections are
    assigned as the module uses them, so the diagnosis can name the mistake instead of finding none."""
    layers = [Layer(name, "query", Linear(torch.eye(8, dtype=torch.float64))) for name in ("W_q", "W_k", "W_v")]
    layers.append(Layer("W_o", "other", Linear(torch.eye(8, dtype=torch.float64))))
    first = assignments(layers, d_model=8, heads=2)[0]
    assert first.description.startswith("Q=W_q, K=W_k, V=W_v")
