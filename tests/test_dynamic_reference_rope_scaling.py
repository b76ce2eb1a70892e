"""RoPE frequencies recomputed from a declaration equal the installed transformers' own."""

from __future__ import annotations

import pytest
import torch

from attncheck.dynamic.reference import rope_scaling

BASE, HEAD_DIM, MAX_POSITIONS = 500000.0, 64, 64

DECLARATIONS = {
    "default": {"rope_type": "default"},
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16},
    "yarn with mscale": {
        "rope_type": "yarn",
        "factor": 40.0,
        "original_max_position_embeddings": 16,
        "mscale": 1.0,
        "mscale_all_dim": 0.707,
        "beta_fast": 16,
    },
    "longrope": {
        "rope_type": "longrope",
        "original_max_position_embeddings": 16,
        "short_factor": [1.0 + 0.1 * i for i in range(HEAD_DIM // 2)],
        "long_factor": [2.0 + 0.2 * i for i in range(HEAD_DIM // 2)],
    },
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32,
    },
}


@pytest.mark.parametrize("seq_len", [None, 200])
@pytest.mark.parametrize("name", list(DECLARATIONS))
def test_frequencies_equal_transformers(name, seq_len):
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    declared = {**DECLARATIONS[name], "rope_theta": BASE}
    config = transformers.LlamaConfig(
        hidden_size=HEAD_DIM * 4,
        num_attention_heads=4,
        max_position_embeddings=MAX_POSITIONS,
        rope_parameters=declared,
    )
    scheme = declared["rope_type"]
    if scheme == "default":
        expected = 1.0 / BASE ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM)
        expected_factor = 1.0
    else:
        expected, expected_factor = ROPE_INIT_FUNCTIONS[scheme](config, "cpu", seq_len)
    got = rope_scaling.frequencies(BASE, HEAD_DIM, declared, MAX_POSITIONS, seq_len)
    # transformers works in float32: agreement to float32 precision
    assert torch.allclose(got.inv_freq, expected.to(torch.float64), rtol=1e-6, atol=0.0)
    assert got.attention_factor == pytest.approx(expected_factor, rel=1e-12)


def test_ntk_is_a_change_of_base():
    got = rope_scaling.frequencies(10000.0, 8, {"type": "ntk", "factor": 4.0})
    assert torch.allclose(got.inv_freq, rope_scaling.standard(10000.0 * 4.0 ** (8 / 6), 8))


def test_an_unknown_scheme_is_named():
    with pytest.raises(ValueError, match="'su' is not modelled"):
        rope_scaling.frequencies(10000.0, 8, {"rope_type": "su"})
