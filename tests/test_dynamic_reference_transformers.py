"""The variant reference against the installed transformers' own attention classes, in place.

Each class is built from a small config, run in float64 without a mask (so eager attention is
bidirectional), and compared with the float64 reference built from what the child would read
(``inside.variant_facts``: the config's rope parameters, scale, soft-cap, sinks, q/k norms, T5
table) and the module's own projection weights. Skipped cleanly without transformers.
"""

from __future__ import annotations

import pytest
import torch

from attncheck.dynamic.inside.variant_facts import declarations
from attncheck.dynamic.reference import mha, variant_fit
from attncheck.dynamic.reference.rope import rope_hook

transformers = pytest.importorskip("transformers")

B, S, D, HEADS, KV_HEADS = 2, 7, 32, 4, 2
TOL = 1e-5  # the checker's float64 tolerance; HF builds inv_freq in float32


def _linear(layer: torch.nn.Linear) -> mha.Linear:
    return mha.Linear(layer.weight.detach(), None if layer.bias is None else layer.bias.detach())


def _best_error(module: torch.nn.Module, output: torch.Tensor, x: torch.Tensor, names: tuple[str, ...]) -> float:
    """The smallest difference between ``output`` and the reference over the declared readings."""
    out: dict[str, torch.Tensor] = {}
    facts = declarations(module, out)
    output = output.detach()
    heads = HEADS
    head_dim = getattr(module, "head_dim", D // heads)
    declared = variant_fit.Declared(facts, out, heads, head_dim, S, S)
    q, k, v, o = (_linear(getattr(module, name)) for name in names)
    kv_heads = k.weight.shape[0] // head_dim
    errors = []
    for candidate in variant_fit.candidates(declared, (), rotary=True):
        rope = None if candidate.rope is None else rope_hook(candidate.rope, torch.arange(S), torch.arange(S))
        expected = mha.mha(
            x,
            x,
            x,
            mha.Projections(q, k, v, o),
            heads,
            num_kv_heads=kv_heads,
            rope=rope,
            qk_norm=candidate.qk_norm,
            variant=candidate.variant,
        )
        errors.append(float((expected - output).abs().max()))
    assert errors, f"no reading declared by {type(module).__name__}: {facts}"
    return min(errors)


@pytest.fixture(autouse=True)
def _float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    yield
    torch.set_default_dtype(previous)


def _eager(config):
    config._attn_implementation = "eager"
    return config


def _rotary(modeling, config, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin from the model file's own rotary module, as the model passes them in."""
    rotary = getattr(modeling, next(n for n in dir(modeling) if n.endswith("RotaryEmbedding")))(config)
    return rotary(x, torch.arange(S)[None].expand(B, S))


ROPE = {
    "llama3": {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    },
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16},
    "linear": {"rope_type": "linear", "rope_theta": 1e6, "factor": 2.0},
}


@pytest.mark.parametrize("scheme", list(ROPE))
def test_llama_with_declared_rope_scaling(scheme):
    from transformers.models.llama import modeling_llama

    config = _eager(
        transformers.LlamaConfig(
            hidden_size=D,
            num_attention_heads=HEADS,
            num_key_value_heads=KV_HEADS,
            max_position_embeddings=64,
            rope_parameters=ROPE[scheme],
        )
    )
    module = modeling_llama.LlamaAttention(config, 0).eval()
    x = torch.randn(B, S, D)
    output = module(x, _rotary(modeling_llama, config, x), None)[0]
    assert _best_error(module, output, x, ("q_proj", "k_proj", "v_proj", "o_proj")) <= TOL


def test_gemma2_query_pre_attn_scalar_and_soft_cap():
    from transformers.models.gemma2 import modeling_gemma2

    config = _eager(
        transformers.Gemma2Config(
            hidden_size=D,
            num_attention_heads=HEADS,
            num_key_value_heads=KV_HEADS,
            head_dim=D // HEADS,
            query_pre_attn_scalar=144,
            attn_logit_softcapping=5.0,
        )
    )
    module = modeling_gemma2.Gemma2Attention(config, 0).eval()
    x = 4 * torch.randn(B, S, D)  # large enough scores to engage the soft-cap
    output = module(x, _rotary(modeling_gemma2, config, x), None)[0]
    assert _best_error(module, output, x, ("q_proj", "k_proj", "v_proj", "o_proj")) <= TOL


def test_qwen3_qk_norm():
    from transformers.models.qwen3 import modeling_qwen3

    config = _eager(
        transformers.Qwen3Config(
            hidden_size=D, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=D // HEADS
        )
    )
    module = modeling_qwen3.Qwen3Attention(config, 0).eval()
    with torch.no_grad():
        module.q_norm.weight.add_(0.1 * torch.randn(D // HEADS))
        module.k_norm.weight.add_(0.1 * torch.randn(D // HEADS))
    x = torch.randn(B, S, D)
    output = module(x, _rotary(modeling_qwen3, config, x), None)[0]
    assert _best_error(module, output, x, ("q_proj", "k_proj", "v_proj", "o_proj")) <= TOL


def test_gpt_oss_sinks():
    from transformers.models.gpt_oss import modeling_gpt_oss

    config = _eager(
        transformers.GptOssConfig(
            hidden_size=D, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=D // HEADS
        )
    )
    module = modeling_gpt_oss.GptOssAttention(config, 0).eval()
    with torch.no_grad():
        module.sinks.copy_(torch.randn(HEADS))
    x = torch.randn(B, S, D)
    output = module(x, _rotary(modeling_gpt_oss, config, x), None)[0]
    assert _best_error(module, output, x, ("q_proj", "k_proj", "v_proj", "o_proj")) <= TOL


def test_t5_relative_bias_at_scale_one():
    from transformers.models.t5 import modeling_t5

    config = _eager(transformers.T5Config(d_model=D, d_kv=D // HEADS, num_heads=HEADS))
    module = modeling_t5.T5Attention(config, has_relative_attention_bias=True).eval()
    x = torch.randn(B, S, D)
    output = module(x)[0]
    assert _best_error(module, output, x, ("q", "k", "v", "o")) <= TOL
