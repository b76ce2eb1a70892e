"""Binding the families of learners' code: the lecture (Karpathy's "Let's build GPT"), whose width is a
constant of the file and whose multi-head attention is a list of Head modules concatenated; and
additive (Bahdanau) attention from a decoder state."""

from __future__ import annotations

from attncheck.dynamic.binding import source_facts
from attncheck.dynamic.binding.bind import bind
from tests.dynamic_support import FIXTURES, file_result

LECTURE = FIXTURES / "correct" / "lecture_heads_global_width.py"


def _facts(source: str, name: str) -> source_facts.CodeFacts:
    line = next(i for i, text in enumerate(source.splitlines(), 1) if text.startswith(f"class {name}"))
    return source_facts.read(source, name, line)


def test_the_files_constant_that_a_projection_takes_is_the_width():
    source = LECTURE.read_text()
    assert _facts(source, "Head").global_width == 64
    result = file_result(LECTURE)
    head = bind(next(t for t in result.targets if t.name == "Head"), source=source)
    assert head.dims.d_model == 64


def test_a_constant_no_projection_takes_is_no_width():
    source = (
        "import torch.nn as nn\nblock_size = 32\nhead_size = 8\n\n"
        "class Head(nn.Module):\n    def __init__(self, d_model):\n        super().__init__()\n"
        "        self.q = nn.Linear(d_model, head_size)\n        self.n = block_size\n"
    )
    assert _facts(source, "Head").global_width is None


def test_heads_kept_as_modules_and_concatenated_are_named():
    source = LECTURE.read_text()
    assert _facts(source, "MultiHeadAttention").heads_as_modules == "Head"
    result = file_result(LECTURE)
    binding = bind(next(t for t in result.targets if t.name == "MultiHeadAttention"), source=source)
    assert "Head modules concatenated" in binding.reason and not binding.hint  # nothing to declare
    # a list of plain layers, or heads that are summed rather than concatenated, are not this construct
    layers = source.replace("[Head(head_size) for _ in range(num_heads)]", "[nn.Linear(8, 8) for _ in range(2)]")
    assert _facts(layers, "MultiHeadAttention").heads_as_modules == ""
    summed = source.replace("torch.cat([h(x) for h in self.heads], dim=-1)", "sum(h(x) for h in self.heads)")
    assert _facts(summed, "MultiHeadAttention").heads_as_modules == ""


def test_a_decoder_state_of_additive_attention_is_skipped_with_why():
    """Bahdanau: ``query`` is (batch, hidden), given a position axis to be added to every key's term; the
    harness's 3-D query made that broadcast fail, reported as the user's ATT901."""
    path = FIXTURES / "correct" / "attention_pooling_additive.py"
    source, result = path.read_text(), file_result(path)
    assert _facts(source, "BahdanauAttention").additive_states == {"query"}
    binding = bind(next(t for t in result.targets if t.name == "BahdanauAttention"), source=source)
    assert "additive attention from a decoder state" in binding.reason
    assert _facts(source, "AttentionPooling").additive_states == frozenset()  # no unsqueezed argument


def test_hf_conv1d_takes_its_input_width_second():
    """GPT-2's ``Conv1D(nf, nx)`` is (output width, input width), the reverse of ``nn.Linear``."""
    source = (
        "import torch.nn as nn\nfrom transformers.pytorch_utils import Conv1D\nn_embd = 48\nn_qkv = 144\n\n"
        "class Attention(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.c_attn = Conv1D(n_qkv, n_embd)\n"
    )
    assert _facts(source, "Attention").global_width == 48
