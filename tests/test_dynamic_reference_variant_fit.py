"""The readings a module's declarations admit, and what is never taken from them."""

from __future__ import annotations

import pytest
import torch

from attncheck.dynamic.inside.variant_facts import declared_scalars
from attncheck.dynamic.reference import variant_fit
from attncheck.dynamic.reference.variants import index_grid

HEADS, HEAD_DIM, SEQ = 4, 8, 7


def _declared(scalars=None, tensors=None, norms=None, unmodelled=()) -> variant_fit.Declared:
    facts = {
        "scalars": scalars or {},
        "tensors": list(tensors or {}),
        "norms": norms or {},
        "unmodelled": list(unmodelled),
    }
    out = {f"declared/{role}": value for role, value in (tensors or {}).items()}
    return variant_fit.Declared(facts, out, HEADS, HEAD_DIM, SEQ, SEQ)


def test_nothing_declared_gives_no_reading():
    assert variant_fit.candidates(_declared(), (), rotary=False) == []


def test_a_window_is_read_in_both_conventions_and_as_a_local_window():
    readings = variant_fit.candidates(_declared({"sliding_window": 3}), (), rotary=False)
    assert [r.variant.name for r in readings] == [
        "sliding window 3 (W keys)",
        "sliding window 3 (W+1 keys)",
        "local window |i-j| < 3",
        "local window |i-j| <= 3",
    ]
    assert [r.masks_causal for r in readings] == [True, True, False, False]
    _, _, i, j = index_grid(1, 1, SEQ, SEQ)
    assert [int(r.variant.mask_mods[0](0, 0, i, j).sum(-1).max()) for r in readings] == [3, 4, 5, 7]


def test_a_declared_scale_is_taken_unless_the_static_pass_calls_the_scaling_wrong():
    (reading,) = variant_fit.candidates(_declared({"query_pre_attn_scalar": 144}), (), rotary=False)
    assert reading.variant.scale == 144**-0.5
    (distrusted,) = variant_fit.candidates(_declared({"query_pre_attn_scalar": 144}), ("ATT201",), rotary=False)
    assert distrusted.variant.scale is None


def test_a_scale_above_one_is_never_taken_as_intended():
    (reading,) = variant_fit.candidates(_declared({"scale": HEAD_DIM**0.5}), (), rotary=False)
    assert reading.variant.scale is None


def test_rope_is_anchored_to_the_declared_base():
    readings = variant_fit.candidates(_declared({"rope_theta": 500000.0}), (), rotary=True)
    assert {r.rope.style for r in readings} == {"half", "interleaved"}
    expected = 500000.0 ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM)
    assert all(torch.allclose(torch.tensor(r.rope.frequencies, dtype=torch.float64), expected) for r in readings)


def test_alibi_slopes_from_a_buffer_in_three_forms():
    readings = variant_fit.candidates(_declared(tensors={"alibi_slopes": torch.rand(HEADS)}), (), rotary=False)
    assert [r.variant.name for r in readings] == ["ALiBi (post-scale)", "ALiBi (pre-scale)", "ALiBi (symmetric)"]
    assert all(r.variant.positional for r in readings)


def test_dynamic_scaling_is_read_from_the_declaration_at_the_run_length_not_from_a_buffer():
    """A dynamic module's inv_freq buffer holds the frequencies of whichever length ran last."""
    dynamic = {"rope_type": "dynamic", "factor": 2.0}
    scalars = {"rope_theta": 10000.0, "max_position_embeddings": 16, "rope_scaling": dynamic}
    stale = {"inv_freq": torch.full((HEAD_DIM // 2,), 0.5, dtype=torch.float64)}
    short = variant_fit.rope_specs(_declared(scalars, stale), rotary=True)[0]
    expected = 1.0 / 10000.0 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM)
    assert short is not None and torch.allclose(torch.tensor(short.frequencies, dtype=torch.float64), expected)
    assert short.scheme == "declared base 10000 with dynamic scaling"
    facts = {"scalars": scalars, "tensors": ["inv_freq"], "norms": {}, "unmodelled": []}
    long = variant_fit.Declared(facts, {"declared/inv_freq": stale["inv_freq"]}, HEADS, HEAD_DIM, 24, 24)
    grown = 10000.0 * (2.0 * 24 / 16 - 1.0) ** (HEAD_DIM / (HEAD_DIM - 2))
    spec = variant_fit.rope_specs(long, rotary=True)[0]
    assert spec is not None and spec.frequencies[1] == pytest.approx(grown ** (-2 / HEAD_DIM))


def test_a_window_switched_off_is_no_window():
    """Qwen2's config keeps sliding_window = 4096 next to use_sliding_window = False."""
    off = {"sliding_window": 4096, "use_sliding_window": False}
    assert [r.variant.name for r in variant_fit.candidates(_declared(off), (), rotary=False)] == ["declared rotation"]
    assert variant_fit.declared_term(off, "window") is None
    assert variant_fit.declared_term({"sliding_window": 4096}, "window") == ("sliding_window", 4096)


def test_a_declared_scale_of_one_over_sqrt_d_model_with_several_heads_is_never_taken_as_intended():
    (reading,) = variant_fit.candidates(_declared({"scale": (HEADS * HEAD_DIM) ** -0.5}), (), rotary=False)
    assert reading.variant.scale is None  # the reference keeps 1/sqrt(head_dim): the diagnosis names ATT201
    (head_dim,) = variant_fit.candidates(_declared({"scale": HEAD_DIM**-0.5}), (), rotary=False)
    assert head_dim.variant.scale == HEAD_DIM**-0.5


class _Named(torch.nn.Module):
    def __init__(self, **attributes):
        super().__init__()
        for name, value in attributes.items():
            setattr(self, name, value)


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({"window": 3}, {"sliding_window": 3}),
        ({"local_window_size": 2}, {"sliding_window": 2}),
        ({"attention_window": 5}, {"sliding_window": 5}),
        ({"attn_softcap": 30.0}, {"softcap": 30.0}),
        ({"logit_softclamp_value": 8.0}, {"softcap": 8.0}),
        ({"soft_cap": 50.0}, {"softcap": 50.0}),
    ],
)
def test_a_window_or_cap_under_another_name_is_read_and_its_name_kept(attributes, expected):
    scalars = declared_scalars(_Named(**attributes))
    (canonical, value), (own, _) = next(iter(expected.items())), next(iter(attributes.items()))
    assert scalars[canonical] == value
    assert variant_fit.spelled(scalars, canonical) == own


@pytest.mark.parametrize(
    "attributes",
    [
        {"window_size": [7, 7]},  # Swin's 2-D window: not a sliding window
        {"window": 0},
        {"window": True},
        {"softclamp_logits": True},  # x-transformers' flag, not the cap
        {"window_fn": "hann"},
        {"rewindow": 3},
    ],
)
def test_what_is_not_a_window_or_a_cap_is_not_read_as_one(attributes):
    scalars = declared_scalars(_Named(**attributes))
    assert "sliding_window" not in scalars and "softcap" not in scalars


def test_the_canonical_name_wins_over_an_alias():
    scalars = declared_scalars(_Named(sliding_window=4, window=9))
    assert scalars["sliding_window"] == 4 and variant_fit.spelled(scalars, "sliding_window") == "sliding_window"
