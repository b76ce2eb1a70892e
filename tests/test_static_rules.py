"""The issue-2 rules on the cases that matter: the evidence they name, their severity,
the seed review, and a property test over spellings of the scale."""

from __future__ import annotations

import keyword
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from attncheck.findings import Severity
from attncheck.static.rules import all_rules
from tests.conftest import lint_text

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def findings_of(relative: str):
    return lint_text((FIXTURES / relative).read_text(encoding="utf-8"), path=relative)


def by_code(findings, code):
    return [f for f in findings if f.code == code]


def test_seed003_scale_message_names_the_sequence_length():
    (scale,) = by_code(findings_of("seeds/seed003_review.py"), "ATT201")
    assert "sqrt(S)" in scale.message
    assert "S = query.shape[1]" in scale.message
    assert "sequence length" in scale.message
    assert "head_dim" in (scale.hint or "")


def test_seed003_reports_the_six_mistakes_of_the_review_and_the_crash():
    codes = {f.code for f in findings_of("seeds/seed003_review.py") if f.severity == Severity.ERROR}
    # The review's six, the crash of torch.sqrt(S), and a seventh mistake the review
    # missed: ``matmul(a, value).reshape(N, S, E)`` merges the heads without a transpose.
    assert codes == {"ATT101", "ATT102", "ATT103", "ATT201", "ATT202", "ATT204", "ATT301", "ATT105"}


def test_seed003_projection_message_names_the_unused_layers():
    (missing,) = by_code(findings_of("seeds/seed003_review.py"), "ATT101")
    assert "self.query, self.key, self.value" in missing.message
    (output,) = by_code(findings_of("seeds/seed003_review.py"), "ATT102")
    assert "self.proj" in output.message


def test_documented_t5_scaling_is_only_a_warning():
    (finding,) = by_code(findings_of("buggy/t5_unscaled_documented.py"), "ATT201")
    assert finding.severity == Severity.WARNING
    assert "T5" in finding.message


def test_lecture_bug_names_the_model_width():
    (finding,) = by_code(findings_of("buggy/scale_d_model.py"), "ATT201")
    assert "C = x.shape[2]" in finding.message and "d_model" in finding.message


def test_redundant_dropout_beside_an_applied_one_is_a_warning():
    (finding,) = by_code(findings_of("seeds/seed000_mha.py"), "ATT103")
    assert finding.severity == Severity.WARNING


def test_hf_attention_mask_added_without_evidence_is_not_flagged():
    text = (
        "import torch\n"
        "def attend(q, k, v, attention_mask=None):\n"
        "    scores = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5\n"
        "    if attention_mask is not None:\n"
        "        scores = scores + attention_mask\n"
        "    return torch.softmax(scores, dim=-1) @ v\n"
    )
    assert lint_text(text) == []
    documented = text.replace(
        "None):\n", "None):\n    '''attention_mask: 1 for tokens to keep, 0 for padding.'''\n", 1
    )
    assert [f.code for f in lint_text(documented)] == ["ATT301"]


def test_static_rules_never_import_torch():
    code = (
        "import sys\nfrom attncheck.static.rules import all_rules\nall_rules()\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=FIXTURES.parent)


def test_every_issue2_rule_is_registered():
    assert {"ATT101", "ATT102", "ATT103", "ATT201", "ATT202", "ATT204", "ATT301"} <= {
        r.code for r in all_rules()
    }


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
