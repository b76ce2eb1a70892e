"""Issue 16/23: attention classes built from a config object, as transformers writes its layers:
``(config, layer_idx)`` constructors, ``position_embeddings`` from the file's rotary class, and
causality (and a window) that arrives in the model's 4-D additive mask. The fixture
``bind_config_layer_caller_mask`` runs through the fixture harness; these tests pin the pieces.
Nothing here needs transformers (test_dynamic_binding_transformers checks the real classes)."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import torch

from attncheck.dynamic.binding import source_facts
from attncheck.dynamic.binding.bind import PACKAGE_CONFIG, bind, cache_param
from attncheck.dynamic.diagnosis import fault
from attncheck.dynamic.inside import model_mask
from attncheck.dynamic.inside.executor import _build_config, _heads_first, _probabilities
from attncheck.dynamic.probes.masks import _mask_in
from attncheck.dynamic.reference import unmodelled
from tests.dynamic_support import FIXTURES, file_result

CALLER_MASK = FIXTURES / "correct" / "bind_config_layer_caller_mask.py"


def _binding(path, name):
    target = next(t for t in file_result(path).targets if t.name == name)
    return bind(target, source=path.read_text())


def test_a_config_layer_binds_its_layer_index_rotary_pair_and_the_models_mask():
    binding = _binding(CALLER_MASK, "TinyAttention")
    assert binding.ok, binding.reason
    first = binding.candidates[0]
    assert first.kwargs == {"layer_idx": 0}
    reads = ["num_attention_heads", "num_key_value_heads", "sliding_window", "hidden_size"]  # what __init__ reads
    assert first.config == {"param": "config", "class": "TinyConfig", "reads": reads}
    forward = binding.forward
    assert forward.roles == (("hidden_states", "x"),)
    assert forward.generated == (("position_embeddings", "rotary:TinyRotaryEmbedding"),)
    assert forward.caller_mask and forward.mask_name == "attention_mask"
    assert (forward.position_name, forward.position_kind) == ("position_embeddings", "ids")  # the RoPE shift probe
    assert cache_param(binding.target) == "cache"  # unannotated: a (k, v) tuple may go there


def test_causality_is_left_to_the_caller_only_when_the_class_applies_none_itself():
    text = CALLER_MASK.read_text()
    assert source_facts.read(text, "TinyAttention", 46).causal_by_caller
    own = "class A:\n    def __init__(self):\n        self.is_causal = True\n    def forward(self, x):\n        {}\n"
    assert not source_facts.read(own.format("return sdpa(x, x, x, is_causal=self.is_causal)"), "A", 1).causal_by_caller
    assert not source_facts.read(own.format("return x.tril()"), "A", 1).causal_by_caller
    dispatch = "return f(x, is_causal=self.is_causal) if self.config._attn_implementation == 'sdpa' else x"
    assert source_facts.read(own.format(dispatch), "A", 1).causal_by_caller  # Falcon: its eager path adds the mask
    no_flag = own.replace("self.is_causal = True", "pass").format("return x")
    assert not source_facts.read(no_flag, "A", 1).causal_by_caller


def test_string_choices_an_unannotated_config_and_a_cache_object():
    text = """
import torch
from torch import nn

class SelfAttention(nn.Module):
    def __init__(self, config, attention_type, layer_id=None):
        super().__init__()
        if attention_type == "local":
            self.window = config.window_size
        self.q = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states, attention_mask=None, layer_past: "Cache | None" = None):
        return self.q(hidden_states)
"""
    facts = source_facts.read(text, "SelfAttention", 5)
    assert facts.choices == {"attention_type": ("local",)}
    target = next(t for t in _targets(text) if t.name == "SelfAttention")
    binding = bind(target, source=text)
    assert binding.candidates[0].kwargs["attention_type"] == "local"
    reads = ["window_size", "hidden_size"]
    assert binding.candidates[0].config == {"param": "config", "class": PACKAGE_CONFIG, "reads": reads}
    assert cache_param(target) is None  # a Cache object is no (k, v) tuple


def test_a_bias_the_model_passes_in_is_a_precise_skip():
    text = """
import torch
from torch import nn

class BloomLikeAttention(nn.Module):
    def __init__(self, config, layer_idx=None):
        super().__init__()
        self.heads = config.n_head
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states, residual, alibi, attention_mask):
        b, s, d = hidden_states.shape
        q, k, v = self.qkv(hidden_states).view(b, s, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5 + alibi + attention_mask
        out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, d)
        return self.dense(out) + residual
"""
    binding = bind(next(t for t in _targets(text) if t.name == "BloomLikeAttention"), source=text)
    assert not binding.ok
    assert binding.reason.startswith("forward takes alibi: an attention bias its model computes and passes in")


def _targets(text):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "layer.py"
        path.write_text(text)
        return file_result(path).targets


class _Layer:
    def __init__(self, causal, window):
        self.is_causal, self.sliding_window = causal, window


def test_the_models_mask_is_causal_windowed_and_holds_the_probes_mask():
    allowed = model_mask.keep(_Layer(True, 3), 5, 5, torch.device("cpu"))
    i, j = np.indices((5, 5))
    assert np.array_equal(allowed.numpy(), (j <= i) & (j > i - 3))
    assert model_mask.keep(_Layer(False, None), 5, 5, torch.device("cpu")) is None
    query = torch.zeros(2, 5, 8, dtype=torch.float64)
    probe = torch.zeros(2, 1, 1, 5, dtype=torch.float64)
    probe[0, ..., -1] = model_mask.fill(torch.float64)
    mask = model_mask.combined(_Layer(True, None), probe, query, query)
    assert mask.shape == (2, 1, 5, 5)
    assert bool((mask[1, 0] < 0).equal(torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)))
    assert bool((mask[0, 0, :, -1] < 0).all())  # the probe's padding survives inside the causal mask
    keep = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    assert model_mask.combined(_Layer(True, None), keep, query, query) is keep  # no model passes a bool mask


def test_additive_masks_stay_finite_when_code_casts_them_to_float32_or_float16():
    assert torch.tensor(model_mask.fill(torch.float64)).float().isfinite()
    assert model_mask.fill(torch.float16) == torch.finfo(torch.float16).min
    additive = _mask_in(np.array([True, False]), "additive")
    assert additive[0] == 0.0 and np.isfinite(additive.astype(np.float32)).all()


def test_weights_are_probabilities_not_a_score_bias_returned_beside_them():
    assert _probabilities(torch.softmax(torch.randn(2, 3, 3), -1))
    assert not _probabilities(torch.zeros(2, 3, 3))  # T5's position_bias without a relative table
    assert not _probabilities(torch.full((2, 3, 3), -1e9))


CALLER_FUNCTION = FIXTURES / "correct" / "bind_caller_module_function.py"


def test_an_attention_function_gets_its_calling_module_and_scale_and_returns_heads_second():
    binding = _binding(CALLER_FUNCTION, "eager_attention_forward")
    assert binding.ok, binding.reason
    assert dict(binding.forward.generated) == {"module": "caller-module", "scaling": "scale"}
    assert [role for _, role in binding.forward.roles] == ["query", "key", "value"]
    query = torch.zeros(2, 4, 5, 8)
    assert _heads_first(torch.zeros(2, 5, 4, 8), query).shape == (2, 4, 5, 8)  # the caller's merge layout
    assert _heads_first(torch.zeros(2, 4, 5, 8), query).shape == (2, 4, 5, 8)


def test_a_post_norm_residual_inside_the_attention_class_is_bound_for_the_reference_to_apply():
    text = """
import torch
from torch import nn

class PostNormAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size)

    def forward(self, hidden_states, attention_mask=None):
        q = self.query(hidden_states)
        out = torch.softmax(q @ q.transpose(-1, -2), dim=-1) @ q
        return self.layer_norm(self.dense(out) + hidden_states)
"""
    binding = bind(next(t for t in _targets(text) if t.name == "PostNormAttention"), source=text)
    assert binding.ok and not binding.reason
    assert binding.post_norm  # the reference applies the module's layer_norm to its output plus its input


def test_only_a_rotary_class_built_from_a_config_makes_the_rotary_pair():
    text = "class RotaryEmbedding:\n    def __init__(self, dim, base=10000):\n        pass\n"
    assert source_facts.read(text + "def f(): pass\n", "f", 4).config_classes == frozenset()
    assert "TinyRotaryEmbedding" in source_facts.read(CALLER_MASK.read_text(), "TinyAttention", 46).config_classes


def test_crashes_on_a_config_the_harness_filled_or_a_rank_it_guessed_are_its_own():
    binding = _binding(CALLER_MASK, "TinyAttention")
    namespace = {"type": "AttributeError", "message": "'types.SimpleNamespace' object has no attribute 'rope'"}
    assert "the config object" in fault.harness_guess(binding, namespace, "")
    widths = {"type": "RuntimeError", "message": "mat1 and mat2 shapes cannot be multiplied (14x32 and 1024x2048)"}
    assert "the config object" in fault.harness_guess(binding, widths, "")
    text = """
import torch
from torch import nn

class CoreAttention(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.heads = num_heads

    def forward(self, query_layer, key_layer, value_layer):
        q = query_layer.permute(1, 2, 0, 3)
        return torch.softmax(q @ key_layer.transpose(-1, -2), dim=-1) @ value_layer
"""
    core = bind(next(t for t in _targets(text) if t.name == "CoreAttention"), source=text)
    rank = {"type": "RuntimeError", "message": "permute(sparse_coo): number of dimensions in the tensor input does not"}
    assert "rank" in fault.harness_guess(core, rank, "")


def test_attention_pooling_with_its_own_queries_is_unmodelled_not_a_wrong_shape():
    pooled = [{"shape": [2, 4, 1, 7]}]
    assert "1 queries of its own" in unmodelled.own_queries(pooled, (2, 1, 32), (2, 7, 32))
    assert unmodelled.own_queries([{"shape": [2, 4, 7, 7]}], (2, 1, 32), (2, 7, 32)) is None  # a lost axis
    assert unmodelled.own_queries(pooled, (2, 1, 16), (2, 7, 32)) is None  # another width: a real shape error


def test_a_config_with_its_own_init_under_a_dataclass_base_gets_the_small_sizes():
    """transformers 5 makes ``PretrainedConfig`` a dataclass: ChatGLM's config (Kolors) subclasses it with its
    own ``__init__(hidden_size=4096, kv_channels=128, ...)``. Its fields are that constructor's, not only the
    base's; before, the layer was built 4096 wide and the harness's 32-wide input failed."""

    @dataclasses.dataclass
    class Base:
        return_dict: bool = True

    class GLMConfig(Base):
        def __init__(self, hidden_size=4096, kv_channels=128, num_attention_heads=32, **kwargs):
            super().__init__(**kwargs)
            self.hidden_size, self.kv_channels, self.num_attention_heads = hidden_size, kv_channels, num_attention_heads

    config = _build_config(types.SimpleNamespace(GLMConfig=GLMConfig), "GLMConfig", 0.0)
    assert (config.hidden_size, config.kv_channels, config.num_attention_heads) == (32, 8, 4)
    assert config.return_dict is True
