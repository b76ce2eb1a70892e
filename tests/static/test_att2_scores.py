"""ATT201-ATT204 on the cases that matter: the evidence the scale messages name, T5's documented
unscaled attention, and a property test over spellings of the scale."""

from __future__ import annotations

import keyword

from hypothesis import given, settings
from hypothesis import strategies as st

from attncheck.findings import Severity
from tests.conftest import lint_text
from tests.static.test_att1_projections import by_code, findings_of


def test_seed003_scale_message_names_the_sequence_length():
    (scale,) = by_code(findings_of("seeds/seed003_review.py"), "ATT201")
    assert "sqrt(S)" in scale.message
    assert "S = query.shape[1]" in scale.message
    assert "sequence length" in scale.message
    assert "head_dim" in (scale.hint or "")


def test_documented_t5_scaling_is_only_a_warning():
    (finding,) = by_code(findings_of("buggy/t5_unscaled_documented.py"), "ATT201")
    assert finding.severity == Severity.WARNING
    assert "T5" in finding.message


def test_lecture_bug_names_the_model_width():
    (finding,) = by_code(findings_of("buggy/scale_d_model.py"), "ATT201")
    assert "C = x.shape[2]" in finding.message and "d_model" in finding.message


_MODULE = """
import math, torch, torch.nn as nn
class Attention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.{hd} = d_model // num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
    def forward(self, x):
        b, s, d = x.shape
        {seq} = x.{seq_spelling}
        q, k, v = self.qkv(x).view(b, s, 3, self.num_heads, self.{hd}).permute(2, 0, 3, 1, 4)
        scores = {product}{scale}
        attn = torch.softmax(scores, dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, s, d))
"""
_PRODUCTS = (
    "q @ k.transpose(-2, -1)",
    "torch.matmul(q, k.transpose(-2, -1))",
    "torch.einsum('bhqd,bhkd->bhqk', q, k)",
    "(q @ k.mT)",
)
_SCALES = (
    " / math.sqrt({x})",
    " * {x} ** -0.5",
    " / {x} ** 0.5",
    " * (1.0 / math.sqrt({x}))",
    " / torch.sqrt(torch.tensor({x}, dtype=torch.float32))",
    ".div(math.sqrt({x}))",
)
_HEAD_DIM_NAMES = ("head_dim", "d_k", "dk", "head_size", "d_head", "dim_head", "attention_head_size")
_TAKEN = {"b", "s", "d", "q", "k", "v", "x", "scores", "attn", "self", "math", "torch", "nn"}
_names = st.from_regex(r"[a-z][a-z_0-9]{0,8}", fullmatch=True).filter(
    lambda n: not keyword.iskeyword(n) and n not in _TAKEN
)


@settings(max_examples=40, deadline=None)
@given(
    hd=st.sampled_from(_HEAD_DIM_NAMES),
    seq=_names,
    product=st.sampled_from(_PRODUCTS),
    scale=st.sampled_from(_SCALES),
    seq_spelling=st.sampled_from(("shape[1]", "size(1)")),
    by_seq=st.booleans(),
)
def test_wrong_scale_fires_for_sequence_length_and_never_for_head_dim(
    hd, seq, product, scale, seq_spelling, by_seq
):
    factor = seq if by_seq else f"self.{hd}"
    text = _MODULE.format(
        hd=hd, seq=seq, seq_spelling=seq_spelling, product=product, scale=scale.format(x=factor)
    )
    found = [(f.line, f.code) for f in lint_text(text) if f.severity >= Severity.WARNING]
    assert found == ([(14, "ATT201")] if by_seq else []), text
