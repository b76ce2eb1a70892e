"""The target finder: which classes and functions the dynamic stage will run, and how."""

from __future__ import annotations

import re
from pathlib import Path

import libcst as cst
from hypothesis import example, given
from hypothesis import strategies as st

from attncheck.findings import Parameter
from attncheck.sources import Source
from attncheck.static import targets
from attncheck.static.context import FileContext
from attncheck.static.engine import lint
from attncheck.static.rules import all_rules

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def targets_of(text: str, path: str = "example.py"):
    result = lint(Source(path, text), all_rules())
    assert result.error is None
    return {t.name: t for t in result.targets}


def targets_of_fixture(relative: str):
    path = FIXTURES / relative
    return targets_of(path.read_text(encoding="utf-8"), str(path))


def test_seed004_finds_every_class_and_the_rope_function():
    found = targets_of_fixture("seeds/seed004_attention.py")
    assert set(found) == {
        "MultiHeadAttention",
        "FusedMultiHeadAttention",
        "GroupedQueryAttention",
        "apply_rotary_pos_emb",
        "RoPEMultiHeadAttention",
        "OptimizedMultiHeadAttention",
    }
    assert found["apply_rotary_pos_emb"].kinds == ("rope", "function")
    assert not found["apply_rotary_pos_emb"].is_class
    assert "gqa" in found["GroupedQueryAttention"].kinds
    assert {"gqa", "rope", "self"} <= set(found["OptimizedMultiHeadAttention"].kinds)
    assert "cross" in found["MultiHeadAttention"].kinds


def test_signatures_defaults_annotations_and_mask():
    mha = targets_of_fixture("seeds/seed004_attention.py")["MultiHeadAttention"]
    assert mha.init_params[0] == Parameter("d_model", None, "int")
    assert mha.init_params[2] == Parameter("dropout", "0.1", "float")
    assert [p.name for p in mha.forward_params] == ["query", "key", "value", "mask", "return_attention"]
    assert mha.mask_param == "mask"
    assert "标准多头注意力机制" in (mha.docstring or "")


def test_line_is_the_class_keyword_after_decorators():
    text = (
        "import torch.nn as nn\n\n@some.decorator\nclass SelfAttention(nn.Module):\n"
        "    def forward(self, x):\n        return x\n"
    )
    assert targets_of(text)["SelfAttention"].line == 4


def test_delegating_module_and_sdpa_function_are_targets_but_mlp_is_not():
    found = targets_of_fixture("seeds/seed000_mha.py")
    assert set(found) == {"ScaledDotProductAttention", "MultiHeadAttention"}
    text = (
        "import torch.nn as nn, torch.nn.functional as F\n"
        "class MLP(nn.Module):\n    def forward(self, x):\n        return F.gelu(x)\n"
        "def attend(q, k, v):\n    return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
    )
    found = targets_of(text)
    assert set(found) == {"attend"}
    assert found["attend"].kinds == ("cross", "causal", "function")


def test_causal_kind_from_a_tril_buffer():
    found = targets_of_fixture("correct/gpt2_conv1d.py")
    assert set(found) == {"GPT2Attention"}
    assert found["GPT2Attention"].kinds == ("mha", "self", "causal")


def test_config_class_from_annotation_or_config_parameter():
    text = (
        "from dataclasses import dataclass\nimport torch, torch.nn as nn\n"
        "@dataclass\nclass GPTConfig:\n    n_embd: int = 64\n    n_head: int = 4\n"
        "class CausalSelfAttention(nn.Module):\n"
        "    def __init__(self, config: GPTConfig):\n        super().__init__()\n"
        "    def forward(self, x):\n        return torch.softmax(x @ x.transpose(-2, -1) / 8, dim=-1) @ x\n"
        "class Block(nn.Module):\n    def __init__(self, config):\n        super().__init__()\n"
        "        self.attn = CausalSelfAttention(config)\n"
        "    def forward(self, x):\n        return self.attn(x)\n"
    )
    found = targets_of(text)
    assert found["CausalSelfAttention"].config_class == "GPTConfig"
    assert found["Block"].config_class == "GPTConfig"
    assert "GPTConfig" not in found


def test_every_seed_and_correct_fixture_yields_a_target():
    for path in sorted((FIXTURES / "seeds").glob("*.py")) + sorted((FIXTURES / "correct").glob("*.py")):
        assert targets_of(path.read_text(encoding="utf-8"), str(path)), path.name


# The kinds read from a definition's text, as first written: one case-insensitive regex each.
_GQA_WORDS = r"num_kv_heads|n_kv_heads|num_key_value_heads|num_query_groups|kv_heads|repeat_kv|enable_gqa"
_ORACLE = {
    "gqa": re.compile(_GQA_WORDS),
    "rope": re.compile(r"rotary|rope|\bcos\b|\bsin\b|cos_cached|freqs_cis", re.I),
    "causal": re.compile(r"torch\.tril|torch\.triu|\.tril\(|\.triu\(|is_causal\s*=\s*True|causal", re.I),
}
_PIECES = st.sampled_from([
    "cos", "COS", "sin", "Sin", "_", " ", "(", ".", "\n", "x", "rotary", "RoPE", "freqs_cis", "cos_cached",
    "torch.tril", "torch.TRIU", ".tril(", "is_causal = True", "Causal", "kv_heads", "repeat_kv", "K", "\u212a",
])


@given(st.lists(_PIECES | st.text(max_size=3), max_size=12).map("".join))
def test_text_kinds_read_what_the_case_insensitive_patterns_read(text):
    expected = [kind for kind, pattern in _ORACLE.items() if pattern.search(text)]
    assert targets._text_kinds(text) == expected


@given(st.lists(st.sampled_from(["class", "def", "async def", "async  def", " ", "\n", "Attn", "Attn2", "A",
                                 "x = 1", ":", "#"]), max_size=14).map("".join),
       st.sampled_from(["Attn", "Attn2", "A"]), st.booleans())
@example("class\nclass A:\n", "A", True)  # a keyword alone on a line must not hide the next definition
def test_definition_lines_are_the_first_match_of_a_search_per_name(text, name, is_class):
    keyword = "class" if is_class else r"(?:async\s+)?def"
    match = re.compile(rf"^{keyword}\s+{re.escape(name)}\b", re.M).search(text)
    expected = text.count("\n", 0, match.start()) + 1 if match else 1
    context = FileContext(Source("t.py", text), cst.Module(body=[]))
    line, start = context.shared(targets._definition_starts).get((is_class, name), (1, 0))
    assert line == expected
    assert start == (match.start() if match else 0)


def _text_to_next_top_level_line(text: str, line: int) -> str:
    """The definition's text as a walk over the file's lines reads it."""
    lines = text.splitlines(keepends=True)
    end = next((i for i in range(line, len(lines)) if lines[i][:1] not in (" ", "\t", "\n", "\r", "#", ")", "]", "}")),
               len(lines))
    return "".join(lines[line - 1 : end])


@given(st.lists(st.sampled_from(["class A:", "def A():", "\n", "    x = 1", "\tpass", ")", "]", "# c", "@d",
                                 "y = 2", "\r\n", " "]), max_size=14).map("".join))
def test_a_definitions_text_runs_to_the_next_top_level_line(text: str) -> None:
    context = FileContext(Source("t.py", text), cst.Module(body=[]))
    node = cst.ClassDef(cst.Name("A"), cst.IndentedBlock([]))
    line, found = targets._definition(context, node)
    assert found == _text_to_next_top_level_line(text, line)
