"""ATT104-ATT106 and ATT203: fixtures, the ATT106 fix, and generated head layouts."""

from __future__ import annotations

import re
from pathlib import Path

import libcst as cst
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attncheck.findings import Finding
from tests.conftest import lint_text

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
_EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>ATT\d+(?:\s*,\s*ATT\d+)*)")


def expected(text: str) -> set[tuple[int, str]]:
    """The (line, code) pairs a fixture marks with ``# expect:``."""
    pairs = set()
    for number, line in enumerate(text.splitlines(), start=1):
        match = _EXPECT.search(line)
        if match:
            pairs |= {(number, code.strip()) for code in match.group("codes").split(",")}
    return pairs


def reported(text: str, path: str) -> set[tuple[int, str]]:
    return {(f.line, f.code) for f in lint_text(text, path=path) if f.severity > 0}


def fixture_params(*patterns: str):
    paths = sorted(p for pattern in patterns for p in FIXTURES.glob(pattern))
    assert paths, patterns
    return [pytest.param(p, id=f"{p.parent.name}/{p.name}") for p in paths]


def apply_fixes(text: str, findings: list[Finding]) -> str:
    """Apply every Edit of ``findings``, last first, as ``--fix`` does."""
    edits = sorted((edit for f in findings for edit in f.fix), key=lambda e: e.start, reverse=True)
    for edit in edits:
        text = text[: edit.start] + edit.replacement + text[edit.end :]
    return text


@pytest.mark.parametrize(
    "path", fixture_params("buggy/layout_*.py", "buggy/order_*.py", "correct/layout_*.py")
)
def test_fixture_reports_exactly_its_markers(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert reported(text, str(path)) == expected(text)


VIEW_AFTER_TRANSPOSE = """\
import torch


def merge(ctx, b, s, d):
    ctx = ctx.transpose(1, 2)
    out = ctx.view(b, s, d)
    return out.permute(0, 2, 1).view(b, -1) + ctx.mT.view(-1).sum()
"""


def test_view_after_transpose_fix_replaces_view_with_reshape() -> None:
    findings = [f for f in lint_text(VIEW_AFTER_TRANSPOSE) if f.code == "ATT106"]
    assert [f.line for f in findings] == [6, 7, 7]
    fixed = apply_fixes(VIEW_AFTER_TRANSPOSE, findings)
    cst.parse_module(fixed)
    assert "ctx.reshape(b, s, d)" in fixed and ".permute(0, 2, 1).reshape(b, -1)" in fixed
    assert [f for f in lint_text(fixed) if f.code == "ATT106"] == []


def test_layout_fixture_fix_runs_clean() -> None:
    path = FIXTURES / "buggy" / "layout_view_after_transpose.py"
    text = path.read_text(encoding="utf-8")
    fixed = apply_fixes(text, lint_text(text))
    assert "ATT106" not in {f.code for f in lint_text(fixed)}


_SIZES = {
    "batch": ["b", "B", "batch_size", "bsz"],
    "seq": ["s", "T", "seq_len", "tgt_len"],
    "heads": ["self.num_heads", "H", "self.n_head", "num_heads"],
    "head_dim": ["self.d_k", "self.head_dim", "E // H", "C // self.n_head"],
}


@settings(max_examples=30, deadline=None)
@given(
    order=st.permutations(["seq", "heads"]),
    names=st.fixed_dictionaries({role: st.sampled_from(options) for role, options in _SIZES.items()}),
    method=st.sampled_from(["view", "reshape"]),
)
def test_head_split_fires_exactly_when_heads_precede_seq(order, names, method) -> None:
    sizes = ", ".join([names["batch"], names[order[0]], names[order[1]], names["head_dim"]])
    text = (
        f"def split(self, x, b, B, batch_size, bsz, s, T, seq_len, tgt_len, H, E, C, num_heads):\n"
        f"    return self.W_q(x).{method}({sizes})\n"
    )
    codes = [f.code for f in lint_text(text) if f.code == "ATT104"]
    assert codes == (["ATT104"] if order[0] == "heads" else [])


def test_seed_003_merge_without_transpose_is_flagged() -> None:
    text = (
        "def forward(self, query, key, value, attn_mask=None):\n"
        "    N, S, E = query.shape\n    N, T, E = value.shape\n    H = self.n_head\n"
        "    query = query.reshape(N, S, H, E//H).transpose(1,2)\n"
        "    key = key.reshape(N, T, H, E//H).permute(0,2,3,1)\n"
        "    e = torch.matmul(query,key) / math.sqrt(E // H)\n"
        "    a = torch.softmax(e,dim=-1)\n"
        "    value = value.reshape(N, T, H, E//H).transpose(1,2)\n"
        "    output = torch.matmul(a,value).reshape(N, S, E)\n"
        "    return output\n"
    )
    assert ("ATT105", 10) in {(f.code, f.line) for f in lint_text(text)}
