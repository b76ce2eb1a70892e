"""Class-token pooling: which rows query, and that the reference for them is the first row of self-attention."""

from __future__ import annotations

import torch

from attncheck.dynamic.reference import mha, pooling, unmodelled


def test_pooled_rows_needs_fewer_positions_each_a_softmax_row_over_every_key():
    rows = [{"shape": [2, 4, 1, 7], "dim": 3}]
    assert pooling.pooled_rows(rows, (2, 1, 32), (2, 7, 32)) == 1
    assert pooling.pooled_rows(rows, (2, 1, 16), (2, 7, 32)) is None  # another width: a real shape error
    assert pooling.pooled_rows([{"shape": [2, 4, 7, 7], "dim": 3}], (2, 1, 32), (2, 7, 32)) is None  # a lost axis
    assert pooling.pooled_rows([{"shape": [2, 4, 1, 3], "dim": 3}], (2, 1, 32), (2, 7, 32)) is None  # not every key
    assert pooling.pooled_rows(rows, (2, 9, 32), (2, 7, 32)) is None  # more positions than tokens: no such rows
    latents = [{"shape": [2, 4, 9, 7], "dim": 3}]
    assert pooling.pooled_rows(latents, (2, 9, 32), (2, 7, 32)) == 9  # a Perceiver's 9 latents over 7 tokens
    assert pooling.pooled_rows(latents, (2, 7, 32), (2, 7, 32)) is None  # one row per token: no pooling


def test_query_rows_take_the_class_token_first_or_last():
    tokens = torch.arange(2 * 5 * 3, dtype=torch.float64).reshape(2, 5, 3)
    first, last = pooling.choices(1, 5, [], {})
    assert torch.equal(first.of(tokens), tokens[:, :1])
    assert torch.equal(last.of(tokens), tokens[:, -1:])
    keep = torch.rand(2, 1, 5, 5) > 0.5
    assert torch.equal(first.keep_rows(keep), keep[..., :1, :])
    assert torch.equal(last.keep_rows(keep), keep[..., -1:, :])
    assert "first token" in first.text


def test_class_token_reference_is_the_first_row_of_self_attention():
    torch.manual_seed(0)
    d, heads = 8, 2
    proj = mha.Projections(*(mha.Linear(torch.randn(d, d, dtype=torch.float64)) for _ in range(4)))
    x = torch.randn(3, 6, d, dtype=torch.float64)
    full = mha.mha(x, x, x, proj, heads)
    pooled = mha.mha(pooling.QueryRows(1, "first").of(x), x, x, proj, heads)
    assert pooled.shape == (3, 1, d)
    torch.testing.assert_close(pooled, full[:, :1])


def test_learned_queries_are_a_parameter_a_projection_read():
    from attncheck.dynamic.binding.weights import Layer

    queries = torch.randn(2, 8, dtype=torch.float64)
    layers = [{"name": "to_q", "read": "param:queries", "out": 8, "in": 8, "bias": False},
              {"name": "to_kv", "read": "x", "out": 16, "in": 8, "bias": False}]
    *rows, learned = pooling.choices(2, 7, layers, {"declared/param/queries": queries})
    assert [r.end for r in rows] == ["first", "last"]  # type: ignore[attr-defined]
    tokens = torch.randn(3, 5, 8, dtype=torch.float64)
    assert torch.equal(learned.of(tokens), queries.expand(3, 2, 8))
    linear = mha.Linear(torch.eye(8, dtype=torch.float64))
    recorded = [Layer("to_q", "param:queries", linear), Layer("to_kv", "x", linear)]
    reads = [layer.read for layer in learned.layers(recorded)]
    assert reads == ["query", "kv"]  # cross-attention from the parameter to the input
    assert "2 learned queries (queries)" in learned.text
    assert pooling.choices(3, 7, layers, {"declared/param/queries": queries})[2:] == []  # not 3 queries of width 8
    (only,) = pooling.choices(2, 1, layers, {"declared/param/queries": queries})  # more queries than tokens
    assert only.text == learned.text


def test_a_pooled_output_whose_softmax_is_out_of_sight_is_pooling_not_a_wrong_shape():
    assert "1 queries of its own" in unmodelled.own_queries([], (2, 1, 32), (2, 7, 32))
    assert unmodelled.own_queries([], (2, 9, 32), (2, 7, 32)) is None  # more positions: no pooling
    assert unmodelled.own_queries([{"shape": [2, 4, 7, 7]}], (2, 1, 32), (2, 7, 32)) is None  # a softmax per token


def test_one_score_per_token_pools_additively():
    additive = [{"shape": [2, 7], "dim": 1}]  # v · tanh(W x): a softmax over the tokens, no (token, token) scores
    assert "1 queries of its own" in unmodelled.own_queries(additive, (2, 1, 32), (2, 7, 32))
    with_scores = [*additive, {"shape": [2, 4, 7, 7], "dim": 3}]
    assert unmodelled.own_queries(with_scores, (2, 1, 32), (2, 7, 32)) is None
