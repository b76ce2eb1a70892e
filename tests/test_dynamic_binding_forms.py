"""Issue 16 (part B): the common correct forms bind without hints, by use and by name, and a crash
on the harness's own guess is a skip with why, never ATT901. The fixtures ``bind_*`` run through
the fixture harness (test_fixtures_dynamic); these tests pin the pieces and the messages."""

from __future__ import annotations

import types

import pytest
import torch

from attncheck.dynamic.binding import source_facts
from attncheck.dynamic.binding.bind import (
    CONVOLUTION_ONLY,
    INPUT_RESIDUAL,
    METHOD_OUTSIDE_CLASS,
    UPSAMPLED,
    bind,
    config_value,
    image_layout,
)
from attncheck.dynamic.binding.mask_docs import documented_float, documented_shape
from attncheck.dynamic.inside.recorder import _einsum_weight
from attncheck.dynamic.probes.judge import UNDESCRIBED_PRE_NORM
from attncheck.dynamic.runner import check_file
from tests.dynamic_support import FIXTURES, Options, file_result, in_process_child, write_module

RASCHKA = """
import torch
from torch import nn

class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, causal=False):
        super().__init__()
        assert d_out % num_heads == 0
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length))
        self.causal = causal

    def forward(self, x, alibi, attention_mask):
        b, num_tokens, d_in = x.shape
        if alibi is None:
            return torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=self.causal)
        return x
"""


def _target(path, name):
    return next(t for t in file_result(path).targets if t.name == name)


def test_source_facts_read_uses_ranks_none_checks_and_causal_switches():
    facts = source_facts.read(RASCHKA, "MultiHeadAttention", 5)
    assert facts.found
    assert {k: facts.init_uses[k] for k in ("d_in", "d_out", "num_heads", "dropout", "context_length")} == {
        "d_in": "width",
        "d_out": "width",
        "num_heads": "heads",
        "dropout": "dropout",
        "context_length": "positions",
    }
    assert facts.ranks == {"x": 3}
    assert facts.none_checked == frozenset({"alibi"})
    assert facts.causal_off  # is_causal=self.causal, and self.causal only holds the causal=False default
    assert not source_facts.read("def f(:\n", "f", 1).found  # unreadable source: no facts, no crash


def test_a_triangle_or_a_true_causal_value_is_not_off():
    tril = "class A:\n    def forward(self, x):\n        m = x.tril()\n        return f(x, is_causal=False)\n"
    assert not source_facts.read(tril, "A", 1).causal_off
    on = "class A:\n    def forward(self, x):\n        return f(x, is_causal=True)\n"
    assert not source_facts.read(on, "A", 1).causal_off


@pytest.mark.parametrize(
    ("docs", "name", "shape"),
    [
        ("mask: (b, s) bool, True = attend.", "mask", "bk"),
        ("src_key_padding: (batch, src_len) bool, True marks padding.", "src_key_padding", "bk"),
        ("mask of shape (batch, 1, 1, seq)", "mask", "b11k"),
        ("attn_mask (batch, 1, q_len, k_len)", "attn_mask", "b1qk"),
        ("attn_mask: bool (seq, seq), True = attend", "attn_mask", None),
        ("Multi-head attention.", "mask", None),
    ],
)
def test_documented_mask_shape(docs, name, shape):
    assert documented_shape(docs, name) == shape


def test_arguments_are_bound_by_their_names_and_use():
    path = FIXTURES / "correct" / "bind_values_keys_query.py"
    binding = bind(_target(path, "SelfAttention"), None, path.read_text())
    assert binding.forward.roles == (("values", "value"), ("keys", "key"), ("query", "query"))
    assert binding.forward.mask_required and binding.forward.neutral[0] == ("b11k", "keep")
    path = FIXTURES / "correct" / "bind_by_use.py"
    binding = bind(_target(path, "MultiHeadAttention"), None, path.read_text())
    assert binding.ok
    assert dict(binding.candidates[0].kwargs) == {
        "d_in": 32, "d_out": 32, "context_length": 16, "dropout": 0.0, "num_heads": 4
    }
    assert binding.candidates[0].by_use == ("d_in", "d_out")


def test_a_documented_required_mask_is_tried_first_in_its_documented_form():
    path = FIXTURES / "correct" / "bind_key_padding_names.py"
    binding = bind(_target(path, "PaddedEncoderAttention"), None, path.read_text())
    assert binding.forward.mask_name == "src_key_padding"
    assert binding.forward.mask_shape == "bk"
    assert binding.forward.neutral[0] == ("bk", "blocked")  # documented: True marks padding


def test_one_head_is_inferred_only_without_any_head_count():
    single = FIXTURES / "correct" / "bind_single_head.py"
    assert bind(_target(single, "SelfAttention"), None, single.read_text()).dims.heads == 1
    hardcoded = single.read_text().replace("super().__init__()", "super().__init__()\n        self.n_head = 4")
    assert bind(_target(single, "SelfAttention"), None, hardcoded).dims.heads == 4


def test_a_crash_on_the_guessed_width_is_skipped_with_a_filled_hint(tmp_path):
    path = write_module(
        tmp_path,
        """
        import torch
        from torch import nn

        class FixedWidthAttention(nn.Module):
            def __init__(self, heads):
                super().__init__()
                self.heads = heads
                self.qkv = nn.Linear(48, 3 * 48)

            def forward(self, x):
                q, k, v = self.qkv(x).chunk(3, dim=-1)
                return torch.softmax(q @ k.transpose(-2, -1) / 48**0.5, dim=-1) @ v
        """,
    )
    findings, results = check_file(file_result(path), Options(), in_process_child)
    assert findings == []
    assert results[0].status == "skipped"
    assert "the input width, which no constructor argument sets" in results[0].reason
    assert "[tool.attncheck.targets.FixedWidthAttention] init = {heads = 4}" in results[0].reason


def test_a_crash_on_a_promised_input_stays_att901(tmp_path):
    path = write_module(
        tmp_path,
        """
        from torch import nn

        class ReshapeAttention(nn.Module):
            def __init__(self, d_model, num_heads):
                super().__init__()
                self.qkv = nn.Linear(d_model, 3 * d_model)

            def forward(self, x):
                b, s, d = x.shape
                return self.qkv(x).view(b, s + 1, d)
        """,
    )
    findings, results = check_file(file_result(path), Options(), in_process_child)
    assert results[0].status == "failed"
    assert [f.code for f in findings] == ["ATT901"]


def test_the_annotated_transformer_as_published_is_only_its_float16_fill(tmp_path):
    text = (FIXTURES / "correct" / "bind_annotated_functional.py").read_text()
    path = write_module(tmp_path, text.replace("masked_fill(mask == 0, -1e4)", "masked_fill(mask == 0, -1e9)"))
    findings, results = check_file(file_result(path), Options(), in_process_child)
    assert {f.code for f in findings} == {"ATT302"}
    assert {r.target.name: r.status for r in results} == {"attention": "failed", "MultiHeadedAttention": "passed"}
    forward = next(c for c in results[0].checks if c.name == "forward")
    assert forward.status == "passed"  # the dropout module argument stays None: no ATT901


def test_projection_flow_names_torch_mha_and_packed_parameters():
    details = {}
    for name, target in (("bind_mha_wrapper.py", "Block"), ("bind_packed_in_proj.py", "PackedInProjAttention")):
        _, results = check_file(file_result(FIXTURES / "correct" / name), Options(), in_process_child)
        result = next(r for r in results if r.target.name == target)
        details[name] = next(c.detail for c in result.checks if c.name == "reference")
    assert "Q=attn.in_proj.q, K=attn.in_proj.k, V=attn.in_proj.v, O=attn.out_proj" in details["bind_mha_wrapper.py"]
    assert "QKV=in_proj_weight (fused, split 32/32/32), O=out_proj" in details["bind_packed_in_proj.py"]


def test_einsum_with_a_weight_is_a_projection_only_on_the_last_axis():
    weight = torch.arange(6.0).reshape(2, 3)
    assert torch.equal(_einsum_weight("bsd", "de", "bse", weight), weight.T)
    assert torch.equal(_einsum_weight("bsd", "ed", "bse", weight), weight)
    assert _einsum_weight("bsd", "de", "bsd", weight) is None
    assert _einsum_weight("bhqd", "bhkd", "bhqk", weight) is None


def test_rotary_inputs_are_built_from_the_files_own_helper():
    path = FIXTURES / "correct" / "bind_rotary_inputs.py"
    binding = bind(_target(path, "Attention"), None, path.read_text())
    assert binding.forward.roles == (("x", "x"),)
    assert binding.forward.generated == (("start_pos", "offset"), ("freqs_cis", "precompute_freqs_cis"))
    without_helper = path.read_text().replace("def precompute_freqs_cis", "def make_table")
    assert "freqs_cis" in bind(_target(path, "Attention"), None, without_helper).reason


def test_a_block_around_an_attention_child_is_not_a_target_but_a_wrapper_of_torch_mha_is():
    block = file_result(FIXTURES / "correct" / "bind_block_with_attention.py")
    assert [t.name for t in block.targets] == ["CausalSelfAttention"]
    wrapper = file_result(FIXTURES / "correct" / "bind_mha_wrapper.py")
    assert [t.name for t in wrapper.targets] == ["Block"]


def test_blocks_read_through_their_constructor_defaults_and_stacks_of_layers_are_not_targets(tmp_path):
    stacks = file_result(FIXTURES / "correct" / "bind_blocks_and_stacks.py")
    assert [t.name for t in stacks.targets] == ["ClassAttn"]
    heads = write_module(
        tmp_path,
        """
        import torch
        from torch import nn

        class Head(nn.Module):
            def __init__(self, n_embd, head_size):
                super().__init__()
                self.key = nn.Linear(n_embd, head_size)
                self.query = nn.Linear(n_embd, head_size)

            def forward(self, x):
                return (self.query(x) @ self.key(x).transpose(-2, -1)).softmax(dim=-1) @ x

        class MultiHeadAttention(nn.Module):
            def __init__(self, n_embd, num_heads, head_size):
                super().__init__()
                self.heads = nn.ModuleList([Head(n_embd, head_size) for _ in range(num_heads)])

            def forward(self, x):
                return torch.cat([h(x) for h in self.heads], dim=-1)
        """,
    )
    assert [t.name for t in file_result(heads).targets] == ["Head", "MultiHeadAttention"]  # heads joined: one MHA


def test_the_forward_check_says_which_all_keep_mask_a_required_mask_got():
    path = FIXTURES / "correct" / "bind_required_mask_qkv.py"
    _, results = check_file(file_result(path), Options(), in_process_child)
    forward = next(c for c in results[0].checks if c.name == "forward")
    assert forward.detail.endswith("the required mask, when no mask is tested: all-keep keep b11k")


def test_a_float_01_mask_is_read_from_the_documentation():
    assert documented_float("attn_mask: (batch, seq_len) float, 1 = attend, 0 = padding.", "attn_mask")
    assert not documented_float("attn_mask: (batch, seq_len) bool, True = attend.", "attn_mask")
    assert not documented_float("mask: bool.\nscores are float", "mask")


def test_an_argument_only_stored_and_never_read_gets_none_and_claims_no_window():
    path = FIXTURES / "correct" / "bind_unread_window_argument.py"
    binding = bind(_target(path, "WindowAttention"), None, path.read_text())
    assert dict(binding.candidates[0].kwargs) == {"dim": 32, "window_size": None, "num_heads": 4}
    assert binding.candidates[0].by_use == ("window_size",)
    read = path.read_text().replace("b, n, c = x.shape", "b, n, c = x.shape\n        n = n + 0 * self.window_size[0]")
    assert "window_size" in bind(_target(path, "WindowAttention"), None, read).reason


@pytest.mark.parametrize(
    ("names", "layout"),
    [
        (("B", "C", "H", "W"), "bchw"),
        (("b", "c", "h", "w"), "bchw"),
        (("B", "H", "W", "C"), "bhwc"),
        (("B", "N", "C"), None),
        (("b", "h", "s", "d"), None),  # heads first: no feature map
        (("B", "T", "H", "W"), None),
    ],
)
def test_a_feature_map_layout_is_read_from_the_names_the_forward_unpacks(names, layout):
    assert image_layout(names) == layout


def test_a_class_on_feature_maps_binds_with_its_layout_and_heads_of_its_head_width():
    path = FIXTURES / "correct" / "bind_feature_map_attention.py"
    fastvit = bind(_target(path, "Attention"), None, path.read_text())
    assert fastvit.forward.image == "bchw" and fastvit.dims.heads == 4  # num_heads = dim // head_dim
    assert bind(_target(path, "ChannelsLastAttention"), None, path.read_text()).forward.image == "bhwc"


def test_a_causal_switch_the_forward_defaults_to_false_is_off():
    path = FIXTURES / "correct" / "bind_vision_transformer_forms.py"
    assert source_facts.read(path.read_text(), "Attention", 16).causal_off  # forward(..., is_causal=False)
    on = path.read_text().replace("is_causal: bool = False", "is_causal: bool = True")
    assert not source_facts.read(on, "Attention", 16).causal_off


def test_a_second_streams_config_sizes_and_a_union_annotated_config_class(tmp_path):
    assert [config_value(n) for n in ("cross_hidden_size", "cross_num_attention_heads", "cross_head_dim")] == [32, 4, 8]
    assert config_value("intermediate_size") is None
    path = write_module(
        tmp_path,
        """
        import torch
        from torch import nn

        class EncoderConfig:
            hidden_size = 32

        class DecoderConfig(EncoderConfig):
            pass

        class SelfAttention(nn.Module):
            def __init__(self, config: EncoderConfig | DecoderConfig, layer_idx: int):
                super().__init__()
                self.attention_dropout = 0.0
                self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)

            def forward(self, hidden_states):
                q, k, v = self.qkv(hidden_states).chunk(3, dim=-1)
                return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v
        """,
    )
    binding = bind(_target(path, "SelfAttention"), None, path.read_text())
    assert binding.candidates[0].config["class"] == "EncoderConfig"
    assert not binding.names_dropout  # a constant 0.0: the config's rates are not its
    assert source_facts.read("class A:\n    def __init__(self, config):\n        self.p = config.attn_pdrop\n",
                             "A", 1).names_dropout


def test_of_several_package_configs_the_one_with_every_field_the_class_reads_is_built():
    from attncheck.dynamic.inside.executor import _package_config

    class VisionConfig:
        def __init__(self, hidden_size=8):
            self.hidden_size = hidden_size

    class DecoderConfig:
        def __init__(self, hidden_size=8, attention_downsample_rate=2):
            self.hidden_size, self.attention_downsample_rate = hidden_size, attention_downsample_rate

    module = types.ModuleType("pkg.modeling_x")
    for cls in (VisionConfig, DecoderConfig):
        cls.__module__ = "pkg.configuration_x"
        setattr(module, cls.__name__, cls)
    assert _package_config(module, ("hidden_size", "attention_downsample_rate")) is DecoderConfig
    assert _package_config(module) is None  # several, and nothing to choose by
    code = (
        "class A:\n    def __init__(self, config):\n"
        "        self.d = config.hidden_size // config.attention_downsample_rate\n"
    )
    assert source_facts.read(code, "A", 1).fields_read == {"config": ("hidden_size", "attention_downsample_rate")}


def test_two_batch_axes_unpacked_before_the_tokens_are_fed_as_one_group():
    """SAM's ``batch_size, point_batch_size = query.shape[:2]``: before, skipped as a 4-D input (and the
    reference could not read its downsampled q/k/v); now one point group, (batch, 1, tokens, hidden), whose
    output is read back, and the heads are as wide as the query projection makes them."""
    path = FIXTURES / "correct" / "bind_point_batch_downsampled.py"
    binding = bind(_target(path, "PointAttention"), None, path.read_text())
    assert binding.ok and binding.forward.rank == 4 and binding.forward.to_request()["rank"] == 4
    findings, results = check_file(file_result(path), Options(device="cpu"), in_process_child)
    assert findings == [] and [r.status for r in results] == ["passed"]
    reference = next(c.detail for c in results[0].checks if c.name == "reference")
    assert "Q=q_proj, K=k_proj, V=v_proj, O=o_proj" in reference


@pytest.mark.parametrize(
    ("body", "residual"),
    [
        ("identity = x\n    x = self.norm(x)\n    return self.proj(x) + identity", True),  # diffusers' VAE block
        ("h = self.attention(x)\n    return x + self.proj_out(h)", True),  # VidTok: x never reassigned
        ("identity = x\n    x = self.norm(x)\n    identity = x\n    return self.proj(x) + identity", False),
        ("x = self.norm(x)\n    return x + self.proj(x)", False),  # x is no longer the input
        ("out = self.attn(x)\n    return self.proj(out)", False),
        ("return x + 1", False),  # a constant added: no block's residual (the hostile monkeypatch_torch fixture)
    ],
)
def test_an_input_added_back_is_read_as_a_block_residual(body, residual):
    source = f"def forward(self, x):\n    {body}\n"
    assert source_facts.read(source, "forward", 1).input_residual is residual


@pytest.mark.parametrize(
    ("body", "norm"),
    [
        ("identity = x\n    x = self.norm(x)\n    return self.proj(x) + identity", "norm"),  # diffusers' VAE block
        ("h_ = x\n    h_ = self.norm(h_)\n    return x + self.proj_out(h_)", "norm"),  # LDM's AttnBlock
        ("h = self.group_norm(x)\n    return x + self.proj(h)", "group_norm"),
        ("h = self.attention(x)\n    return x + self.proj_out(h)", ""),  # VidTok: no norm of its own first
        ("h = self.norm(x)\n    return self.proj(h)", ""),  # no input added back: no block
        ("h = self.proj(x)\n    h = self.norm(h)\n    return x + h", ""),  # a norm of what it computed
    ],
)
def test_the_norm_a_residual_block_applies_to_its_input_is_read(body, norm):
    source = f"def forward(self, x):\n    {body}\n"
    assert source_facts.read(source, "forward", 1).pre_norm == norm


def test_a_vae_attention_block_is_checked_through_its_own_norm_and_residual():
    """Before, the harness fed the GroupNorm a (b, s, d) guess and skipped on its crash (HunyuanImage), then
    skipped the block with its residual named; now the reference applies the block's norm and adds its input back."""
    findings, results = check_file(
        file_result(FIXTURES / "correct" / "bind_vae_attention_block.py"), Options(device="cpu"), in_process_child
    )
    assert findings == [] and [r.status for r in results] == ["passed"]
    reference = next(c.detail for c in results[0].checks if c.name == "reference")
    assert "Q=to_q, K=to_k, V=to_v, O=proj" in reference and "norm(input), the input added back" in reference


def test_a_residual_block_whose_norm_the_reference_cannot_read_is_skipped_with_why(tmp_path):
    """A norm of the module's own making (no affine weight, no eps) cannot be applied by the reference: the
    mismatch that leaves is no evidence of a mistake (never ATT903)."""
    path = write_module(
        tmp_path,
        """
        import torch
        from torch import nn

        class PixelNorm(nn.Module):
            def forward(self, x):
                return x / x.pow(2).mean(dim=1, keepdim=True).add(1e-8).sqrt()

        class AttnBlock(nn.Module):
            def __init__(self, in_channels):
                super().__init__()
                self.norm = PixelNorm()
                self.q = nn.Conv2d(in_channels, in_channels, 1)
                self.k = nn.Conv2d(in_channels, in_channels, 1)
                self.v = nn.Conv2d(in_channels, in_channels, 1)
                self.proj_out = nn.Conv2d(in_channels, in_channels, 1)

            def forward(self, x):
                h = self.norm(x)
                q, k, v = self.q(h), self.k(h), self.v(h)
                b, c, hh, ww = q.shape
                q, k, v = (t.reshape(b, c, hh * ww).transpose(1, 2) for t in (q, k, v))
                out = torch.softmax(q @ k.transpose(1, 2) * c**-0.5, dim=-1) @ v
                return x + self.proj_out(out.transpose(1, 2).reshape(b, c, hh, ww))
        """,
    )
    findings, results = check_file(file_result(path), Options(device="cpu"), in_process_child)
    assert findings == [] and [r.status for r in results] == ["skipped"], results[0].checks
    assert results[0].reason.startswith(UNDESCRIBED_PRE_NORM.format(name="norm"))


def test_an_input_added_back_without_a_norm_of_its_own_is_still_skipped_with_why(tmp_path):
    """VidTok's block hands its input to an attention helper and adds it back: no norm of the class reads the
    input first, so there is no block the reference models."""
    path = write_module(
        tmp_path,
        """
        import torch
        from torch import nn

        class Block(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.qkv = nn.Linear(dim, 3 * dim)
                self.proj = nn.Linear(dim, dim)

            def forward(self, x):
                q, k, v = self.qkv(x).chunk(3, dim=-1)
                h = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1) @ v
                return x + self.proj(h)
        """,
    )
    findings, results = check_file(file_result(path), Options(device="cpu"), in_process_child)
    assert findings == [] and [r.status for r in results] == ["skipped"]
    assert results[0].reason.startswith(INPUT_RESIDUAL)


def test_a_forward_written_outside_its_class_is_skipped_with_why(tmp_path):
    """transformers' ``exporter_dynamo._reshaped_vision_attention_forward(self, hidden_states, cu_seqlens)``
    is patched onto vision attention classes: called as a function, the input went to ``self``."""
    path = write_module(
        tmp_path,
        """
        import torch

        def patched_attention_forward(self, hidden_states, cu_seqlens):
            q, k, v = self.qkv(hidden_states).chunk(3, dim=-1)
            return self.proj(torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v)
        """,
    )
    findings, results = check_file(file_result(path), Options(device="cpu"), in_process_child)
    assert findings == [] and [(r.status, r.reason) for r in results] == [("skipped", METHOD_OUTSIDE_CLASS)]


def test_convolution_attention_forms_are_skipped_with_their_construct_named():
    """timm's NextViT ``ConvAttention`` computes no attention; LowFormer's attends over downsampled tokens and
    upsamples its output. Before, both were fed a (b, s, d) guess their convolutions rejected."""
    findings, results = check_file(
        file_result(FIXTURES / "correct" / "bind_convolution_attention_forms.py"), Options(device="cpu"),
        in_process_child,
    )
    reasons = {r.target.name: (r.status, r.reason) for r in results}
    assert findings == []
    assert reasons["MultiHeadConvAttention"] == ("skipped", CONVOLUTION_ONLY)
    assert reasons["DownsampledConvAttention"][0] == "skipped"
    assert reasons["DownsampledConvAttention"][1].startswith(UPSAMPLED)


@pytest.mark.parametrize(
    ("forward", "only"),
    [
        ("return self.proj(self.act(self.conv(x)))", True),
        ("return self.proj(helper(self.conv(x)))", False),  # a function of the file may attend
        ("return self.proj(self.conv(x) @ x)", False),
        ("return self.pool(self.conv(x))", False),  # built by a class that is no plain layer (Attn)
    ],
)
def test_a_class_of_convolutions_alone_is_read_as_computing_no_attention(forward, only):
    pool = "Attn(c)" if "pool" in forward else "nn.AvgPool2d(2)"
    source = (
        "class A(nn.Module):\n    def __init__(self, c):\n        self.conv = nn.Conv2d(c, c, 3)\n"
        f"        self.act = nn.ReLU()\n        self.proj = nn.Conv2d(c, c, 1)\n        self.pool = {pool}\n"
        f"    def forward(self, x):\n        {forward}\n"
    )
    assert source_facts.read(source, "A", 1).convolution_only is only


@pytest.mark.parametrize(
    ("body", "feature_map"),
    [
        ("q, k = F.elu(q) + 1, F.elu(k) + 1\n        return torch.einsum('bnd,bne->bde', k, v)", "elu"),
        ("k = self.feature_map(k)\n        return q @ (k.transpose(-2, -1) @ v)", "feature_map"),
        ("q = torch.exp(q)\n        return torch.matmul(q, k.mT @ v)", "exp"),
        # scores with no softmax: the map is on a product, no feature map of queries or keys
        ("w = torch.relu(q @ k.mT)\n        return w @ v", ""),
        ("s = q @ k.mT\n        return F.relu(s) @ v", ""),
        # softmax attention that also uses an activation is no linear attention
        ("q = F.elu(q)\n        return torch.softmax(q @ k.mT, dim=-1) @ v", ""),
        ("return F.scaled_dot_product_attention(torch.sigmoid(q), k, v)", ""),
        ("return F.relu(q)", ""),  # no product at all
    ],
)
def test_linear_attention_is_a_feature_map_on_queries_or_keys_and_no_softmax(body, feature_map):
    source = f"def attend(q, k, v):\n        {body}\n"
    assert source_facts.read(source, "attend", 1).kernel_feature_map == feature_map


@pytest.mark.parametrize(
    ("forward", "spells"),
    [
        ("causal_mask = attention_mask[:, :, :, :7]\n        return causal_mask", False),  # the caller's mask
        ("return torch.tril(x)", True),
        ("return F.scaled_dot_product_attention(q, k, v, is_causal=True)", True),
        ("return F.scaled_dot_product_attention(q, k, v, is_causal=False)", False),
        ("return make_causal_mask(x)", True),  # a builder of a causal mask
        ("self.is_causal = True\n        return x", True),
    ],
)
def test_causality_is_spelled_by_code_not_by_a_name(forward, spells):
    source = f"def attend(q, k, v, x, attention_mask):\n        {forward}\n"
    assert source_facts.read(source, "attend", 1).spells_causal is spells


@pytest.mark.parametrize(
    "spelling",
    ["is_causal=attention_mask is None", "is_causal=attention_mask is None and q.shape[2] > 1"],
)
def test_causal_only_without_the_mask_is_read_from_the_keyword_value(spelling):
    source = ("def attend(q, k, v, attention_mask=None):\n"
              f"    return F.scaled_dot_product_attention(q, k, v, {spelling})\n")
    assert source_facts.read(source, "attend", 1).causal_without == {"attention_mask"}
    bound = ("def attend(q, k, v, attn_mask=None):\n    flag = attn_mask is None\n"
             "    return F.scaled_dot_product_attention(q, k, v, is_causal=flag)\n")
    assert source_facts.read(bound, "attend", 1).causal_without == {"attn_mask"}
