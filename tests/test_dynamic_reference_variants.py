"""The reference's variant vocabulary against eager ``flex_attention`` in float64: they agree exactly.

Eager flex runs on CPU without gradients; the reference evaluates the same score and mask
functions on a materialised index grid, so any difference is a bug in one of the two.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from attncheck.dynamic.reference import variants

flex_attention = pytest.importorskip("torch.nn.attention.flex_attention")

B, H, L, D = 2, 4, 7, 8


def _flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, variant: variants.Variant) -> torch.Tensor:
    def score_mod(s, b, h, i, j):
        for mod in variant.score_mods:
            s = mod(s, b, h, i, j)
        return s

    def mask_mod(b, h, i, j):
        keep = variant.mask_mods[0](b, h, i, j)
        for mod in variant.mask_mods[1:]:
            keep = keep & mod(b, h, i, j)
        return keep

    block_mask = None
    if variant.mask_mods:
        block_mask = flex_attention.create_block_mask(mask_mod, B, H, q.shape[2], k.shape[2], device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "unfused implementation" on CPU
        return flex_attention.flex_attention(
            q,
            k,
            v,
            score_mod=score_mod if variant.score_mods else None,
            block_mask=block_mask,
            scale=variant.scale,
            enable_gqa=q.shape[1] != k.shape[1],
        )


VARIANTS = {
    "causal": variants.Variant("causal", mask_mods=(variants.causal(),)),
    "window W keys": variants.Variant("w", mask_mods=(variants.sliding_window(3, "W keys"),)),
    "window W+1 keys": variants.Variant("w", mask_mods=(variants.sliding_window(3, "W+1 keys"),)),
    "local": variants.Variant("local", mask_mods=(variants.local_window(2),)),
    "chunked": variants.Variant("chunk", mask_mods=(variants.chunked(3),)),
    "alibi post-scale": variants.Variant("alibi", score_mods=(variants.alibi(variants.alibi_slopes(H), "post-scale"),)),
    "alibi pre-scale": variants.Variant(
        "alibi", score_mods=(variants.alibi(variants.alibi_slopes(H), "pre-scale", 0.35),)
    ),
    "alibi symmetric": variants.Variant("alibi", score_mods=(variants.alibi(variants.alibi_slopes(H), "symmetric"),)),
    "softcap": variants.Variant("cap", score_mods=(variants.softcap(0.5),)),
    "declared scale": variants.Variant("scale", scale=144**-0.5),
    "t5 bias, scale 1": variants.Variant(
        "t5", scale=1.0, score_mods=(variants.position_bias(variants.t5_bias(torch.randn(32, H), L, L, True, 128)),)
    ),
    "swin relative-position table": variants.Variant(
        "swin",
        score_mods=(
            variants.position_bias(variants.relative_table_bias(torch.randn(13, H), variants.swin_index((1, L)))),
        ),
    ),
    "gemma 2: scale, soft-cap, window": variants.Variant(
        "gemma2", scale=0.2, score_mods=(variants.softcap(0.7),), mask_mods=(variants.sliding_window(4, "W keys"),)
    ),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_each_variant_equals_eager_flex_attention_in_float64(name):
    kv_heads = 2  # grouped-query: flex's enable_gqa against the reference's repeat_interleave
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, L, D, dtype=torch.float64, generator=generator)
    k, v = (torch.randn(B, kv_heads, L, D, dtype=torch.float64, generator=generator) for _ in range(2))
    variant = VARIANTS[name]
    reference = variants.attend(q, k, v, variant)
    assert float((reference - _flex(q, k, v, variant)).abs().max()) <= 1e-14
    assert float((reference - variants.attend(q, k, v)).abs().max()) > 1e-3  # the term is visible at this size


def test_the_two_window_conventions_differ_by_one_key():
    _, _, i, j = variants.index_grid(1, 1, L, L)
    w_keys, w_plus_one = (
        variants.sliding_window(3, "W keys")(0, 0, i, j),
        variants.sliding_window(3, "W+1 keys")(0, 0, i, j),
    )
    assert w_keys.sum(-1).max() == 3 and w_plus_one.sum(-1).max() == 4


def test_sinks_join_the_softmax_and_are_dropped():
    generator = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, H, L, D, dtype=torch.float64, generator=generator) for _ in range(3))
    sinks = torch.randn(H, dtype=torch.float64, generator=generator)
    scores = q @ k.transpose(-1, -2) / D**0.5
    expected = (scores.exp() / (scores.exp().sum(-1, keepdim=True) + sinks.exp().view(1, H, 1, 1))) @ v
    got = variants.attend(q, k, v, variants.Variant("sinks", sinks=sinks))
    assert float((got - expected).abs().max()) <= 1e-14


def test_alibi_slopes_for_power_of_two_and_other_head_counts():
    assert variants.alibi_slopes(8).tolist() == [2.0**-p for p in range(1, 9)]
    # BLOOM's build_alibi_tensor for 6 heads: the 4-head slopes, then 2^-1 and 2^-3
    assert variants.alibi_slopes(6).tolist() == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]


def test_t5_buckets_are_exact_near_and_logarithmic_far():
    relative = torch.tensor([-3, -1, 0, 1, 3, 20, 200])
    assert variants.t5_buckets(relative, True, 32, 128).tolist() == [3, 1, 0, 17, 19, 26, 31]
    assert variants.t5_buckets(relative, False, 32, 128).tolist() == [3, 1, 0, 0, 0, 0, 0]
