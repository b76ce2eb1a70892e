"""Issue 16: the layout and the width a module's code states are the ones it is fed.

A sequence-first module (fairseq, torch's ``batch_first=False``) fed batch-first inputs leaks
"batch elements" into each other (a false ATT904); a projection-free core that takes its inputs'
width (``d_k``, ``temperature``) fed another width returns the wrong shape (a false ATT902). The
fixtures ``layout_sequence_first`` and ``projection_free_core_width`` run them whole; these tests pin
the reading."""

from __future__ import annotations

import textwrap
from dataclasses import replace

import pytest

from attncheck.dynamic.binding import layout, source_facts
from attncheck.dynamic.binding.bind import bind
from attncheck.dynamic.probes import kv_cache
from attncheck.dynamic.runner import check_file
from tests.dynamic_support import FIXTURES, Options, file_result, in_process_child, write_module

MHA = """
class Block(nn.Module):
    def __init__(self, d_model, n_heads, first=False):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_heads{extra})

    def forward(self, x):
        {body}
        return self.attn(x, x, x)[0]
"""


def _reason(source: str, name: str = "Block", docs: str = "", first: str = "x") -> str:
    source = textwrap.dedent(source)
    return layout.sequence_first(source_facts.read(source, name, 1), docs, first)


@pytest.mark.parametrize(
    ("extra", "body", "seq_first"),
    [
        ("", "pass", True),  # torch's default: batch_first=False
        (", batch_first=False", "pass", True),
        (", batch_first=first", "pass", True),  # through a constructor argument's default
        (", batch_first=True", "pass", False),
        ("", "x = x.transpose(0, 1)", False),  # the wrapper turns batch-first input around itself
    ],
)
def test_a_wrapped_multihead_attention_states_its_layout(extra, body, seq_first):
    assert bool(_reason(MHA.format(extra=extra, body=body))) is seq_first


@pytest.mark.parametrize(
    ("unpacking", "seq_first"),
    [
        ("tgt_len, bsz, embed_dim = x.size()", True),
        ("T, B, C = x.shape", True),
        ("L, N, E = x.shape", True),
        ("b, s, d = x.shape", False),
        ("B, N, C = x.shape", False),  # timm: N tokens
        ("bsz, tgt_len, embed_dim = x.size()", False),
    ],
)
def test_the_names_of_the_unpacked_shape_state_the_layout(unpacking, seq_first):
    source = f"class A:\n    def forward(self, x):\n        {unpacking}\n        return x\n"
    assert bool(_reason(source, "A")) is seq_first


@pytest.mark.parametrize(
    ("docs", "seq_first"),
    [
        ("x: input of shape `Time x Batch x Channel`", True),
        ("query: (L, N, E) where L is the target length and N the batch size", True),
        ("x: [seq_len, batch, d_model]", True),
        ("x: (batch, seq_len, d_model)", False),
        ("attn_mask: (N, L, S)", False),  # a mask's shape says nothing of the input's layout
        ("x: (L, N, E) or (N, L, E) when batch_first", False),
    ],
)
def test_documented_shapes_state_the_layout(docs, seq_first):
    source = "class A:\n    def forward(self, x):\n        return x\n"
    assert bool(_reason(source, "A", docs)) is seq_first


def test_an_own_batch_first_argument_wins_whatever_the_forward_does():
    source = (
        "class A:\n    def __init__(self, d, batch_first={default}):\n        self.batch_first = batch_first\n"
        "    def forward(self, x):\n        if not self.batch_first:\n            x = x.transpose(0, 1)\n"
        "        b, s, d = x.shape\n        return x\n"
    )
    assert _reason(source.format(default=False), "A") == "its batch_first argument defaults to False"
    assert _reason(source.format(default=True), "A") == ""


def _binding(path, name):
    result = file_result(path)
    target = next(t for t in result.targets if t.name == name)
    return bind(target, None, result.source.text)


def test_a_sequence_first_binding_is_sent_to_the_child():
    binding = _binding(FIXTURES / "correct" / "heads_folded_after_transpose.py", "SequenceFirst")
    assert binding.forward.sequence_first == "forward unpacks query's shape as (tgt_len, bsz, embed_dim)"
    assert binding.forward.to_request()["sequence_first"] is True
    batch_first = _binding(FIXTURES / "correct" / "heads_folded_after_transpose.py", "FoldedAfterTranspose")
    assert batch_first.forward.to_request()["sequence_first"] is False


@pytest.mark.parametrize(
    ("path", "name", "kwargs", "rank"),
    [
        ("correct/softmax_result_used.py", "Kept", {"d_k": 32}, 3),  # torch.bmm: 3-D inputs
        ("correct/projection_free_core_width.py", "ScaledDotProductAttention", {"temperature": 32**0.5}, 0),
        ("correct/projection_free_core_width.py", "Attend", {"dim_head": 32}, 0),
    ],
)
def test_a_projection_free_core_is_given_the_width_it_is_fed(path, name, kwargs, rank):
    binding = _binding(FIXTURES / path, name)
    assert binding.forward.per_head and binding.forward.rank == rank
    (candidate,) = binding.candidates
    assert {k: v for k, v in candidate.kwargs.items() if k in kwargs} == kwargs
    assert "temperature" not in candidate.dropout_names
    assert binding.dims.width // binding.dims.heads == 32  # one head as wide as the width argument says


def test_a_core_with_projections_keeps_the_model_width():
    source = textwrap.dedent(
        """
        class Head(nn.Module):
            def __init__(self, d_k):
                super().__init__()
                self.proj = nn.Linear(d_k, d_k)

            def forward(self, q, k, v):
                return self.proj(q)
        """
    )
    assert source_facts.read(source, "Head", 1).builds_layers
    assert not source_facts.read(source.replace("nn.Linear(d_k, d_k)", "d_k"), "Head", 1).builds_layers


def test_the_kv_cache_probe_leaves_a_sequence_first_module_alone(tmp_path):
    """Its cache is cut from (batch, seq, ...) projection outputs: a (seq, batch, dim) module's would be
    cut across the batch."""
    path = write_module(
        tmp_path,
        """
        from torch import nn

        class Cached(nn.Module):
            def __init__(self, d_model, n_heads):
                super().__init__()
                self.attn = nn.MultiheadAttention(d_model, n_heads)

            def forward(self, x, past_key_value=None):
                return self.attn(x, x, x)[0]
        """,
    )
    binding = _binding(path, "Cached")
    assert binding.forward.sequence_first and not kv_cache.wanted(binding)
    assert kv_cache.wanted(replace(binding, forward=replace(binding.forward, sequence_first="")))


def test_per_head_inputs_have_no_sequence_first_layout(tmp_path):
    """A function on per-head (batch, heads, seq, dim) tensors is not fed (seq, batch, ...), whatever its
    docstring says of the model's inputs; one on (seq, batch, dim) tensors (3-D, by its unpacking) is."""
    path = write_module(
        tmp_path,
        """
        import torch

        def per_head(q, k, v):
            \"\"\"Called from a module whose inputs are (L, N, E).\"\"\"
            return torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1) @ v

        def time_major(q, k, v):
            t, b, d = q.shape
            q, k, v = (x.transpose(0, 1) for x in (q, k, v))
            return (torch.softmax(q @ k.transpose(-2, -1) / d ** 0.5, dim=-1) @ v).transpose(0, 1)
        """,
    )
    assert _binding(path, "per_head").forward.sequence_first == ""
    assert _binding(path, "time_major").forward.sequence_first == "forward unpacks q's shape as (t, b, d)"
    findings, results = check_file(file_result(path), Options(device="cpu"), in_process_child)
    assert findings == [] and [r.status for r in results] == ["passed", "passed"]


GLM = FIXTURES / "correct" / "bind_sequence_first_glm.py"


def test_a_config_built_core_that_permutes_sequence_first_heads_gets_them():
    """ChatGLM's ``CoreAttention(config, layer_number)`` builds no layer and turns (seq, batch, heads,
    head_dim) q, k, v into (batch, heads, seq, head_dim) itself: per-head, sequence-first inputs."""
    binding = _binding(GLM, "CoreAttention")
    assert binding.forward.per_head
    assert binding.forward.sequence_first == (
        "forward permutes query_layer from (seq, batch, heads, head_dim) to (batch, heads, seq, head_dim)"
    )
    assert binding.candidates[0].config is not None  # still built from its config, with the small sizes


def test_a_permute_is_read_through_a_comprehension_over_the_arguments():
    source = textwrap.dedent(
        """
        def forward(self, q, k, v, other):
            q, k, v = [t.permute(1, 2, 0, 3) for t in [q, k, v]]
            other = other.permute(0, 2, 1)
        """
    )
    facts = source_facts.read(source, "forward", 1)
    assert facts.permuted == {"q": (1, 2, 0, 3), "k": (1, 2, 0, 3), "v": (1, 2, 0, 3), "other": (0, 2, 1)}


@pytest.mark.parametrize(
    ("condition", "causal_without"),
    [
        ("mask is None and q.shape[2] == k.shape[2]", {"mask"}),  # ChatGLM: causal only without a mask
        ("mask is None", {"mask"}),
        ("q.shape[2] == k.shape[2]", set()),  # causal whatever the mask
        ("mask is not None", set()),
    ],
)
def test_a_module_causal_only_without_its_mask_is_read(condition, causal_without):
    source = textwrap.dedent(
        f"""
        def forward(self, q, k, v, mask):
            if {condition}:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return F.scaled_dot_product_attention(q, k, v, mask)
        """
    )
    assert source_facts.read(source, "forward", 1).causal_without == causal_without


def test_a_required_mask_leaves_causality_to_the_mask():
    """The harness always passes a required mask, so a core causal only when it gets None is judged without
    causality (before: the real ChatGLM core got a false ATT906 under an all-keep mask)."""
    assert _binding(GLM, "CoreAttention").code_not_causal
    findings, results = check_file(file_result(GLM), Options(device="cpu"), in_process_child)
    assert findings == [] and [r.status for r in results] == ["passed", "passed"]
