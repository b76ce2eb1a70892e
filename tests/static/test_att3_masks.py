"""ATT302-ATT305: fixtures, the ATT302 fix, the seed 004 comment, generated fill values and diagonals."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from attncheck.line_table import split_lines
from attncheck.mask_wording import _clauses_verdict, declared_blocked
from attncheck.static.rules.att3_masks.mask_fill_value import MaskFillValue
from attncheck.static.rules.att3_masks.mask_polarity import _COMMENT
from tests.conftest import lint_text
from tests.static.test_att1_head_layout import apply_fixes, expected, fixture_params, reported

SEEDS = Path("/work/shared/seeds")


@pytest.mark.parametrize(
    "path", fixture_params("buggy/mask_*.py", "buggy/causal_*.py", "correct/mask_*.py", "correct/causal_*.py")
)
def test_fixture_reports_exactly_its_markers(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert reported(text, str(path)) == expected(text)


def test_fill_value_fix_uses_finfo_min_of_the_filled_tensor() -> None:
    text = (
        "import torch\n\n\ndef f(self, scores, mask):\n"
        "    self.att = self.att.masked_fill(mask, -1e10)\n"
        "    return scores.masked_fill(mask == 0, -1e9)\n"
    )
    findings = [f for f in lint_text(text) if f.code == "ATT302"]
    assert len(findings) == 2
    fixed = apply_fixes(text, findings)
    cst.parse_module(fixed)
    assert "scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)" in fixed
    assert "self.att.masked_fill(mask, torch.finfo(self.att.dtype).min)" in fixed
    assert [f for f in lint_text(fixed) if f.code == "ATT302"] == []


def test_fill_value_fix_adds_the_torch_import_when_none_binds_torch() -> None:
    text = "import torch.nn as nn\ns = s.masked_fill(m, -1e9)\n"
    (finding,) = lint_text(text, [MaskFillValue])
    fixed = apply_fixes(text, [finding])
    assert fixed == "import torch.nn as nn\nimport torch\ns = s.masked_fill(m, torch.finfo(s.dtype).min)\n"


def _is_wrong_fill(value: float) -> bool:
    return value < -65504 or -1e-3 < value < 0 or value > 0


_FILL = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e30, max_value=1e30),
    st.sampled_from([-65504.0, -65505.0, -1e4, -1e9, -1e-9, 0.0, 1e-9, 1e4]),
)


@settings(max_examples=80, deadline=None)
@given(value=_FILL)
def test_fill_value_fires_exactly_for_overflow_tiny_or_positive(value: float) -> None:
    findings = lint_text(f"scores = scores.masked_fill(mask == 0, {value!r})\n", [MaskFillValue])
    assert bool(findings) == _is_wrong_fill(value)


@pytest.mark.parametrize(
    "spelling",
    [
        "float('-inf')",
        "-float('inf')",
        "-math.inf",
        "-torch.inf",
        'float("-inf")',
        "torch.finfo(scores.dtype).min",
        "-10000",
        "-1e4",
        "-65504",
    ],
)
def test_fill_value_accepts_safe_spellings(spelling: str) -> None:
    assert lint_text(f"scores = scores.masked_fill(mask == 0, {spelling})\n", [MaskFillValue]) == []


@pytest.mark.parametrize(
    "spelling", ["float('-inf')", "-float('inf')", "-math.inf", "-torch.inf", 'float("-inf")']
)
def test_minus_inf_fill_without_guard_warns(spelling: str) -> None:
    text = f"def f(s, mask):\n    return s.masked_fill(mask == 0, {spelling}).softmax(-1)\n"
    assert [(f.code, str(f.severity)) for f in lint_text(text)] == [("ATT303", "warning")]


def test_seed_004_mask_comment_contradicts_code_on_the_masked_fill_line() -> None:
    text = (SEEDS / "004_722542f903dca538.txt").read_text(encoding="utf-8")
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    lines = code.splitlines()
    comment = next(i for i, line in enumerate(lines, start=1) if "True/1 表示需要屏蔽" in line)
    findings = [f for f in lint_text(code) if f.code == "ATT304"]
    assert [f.line for f in findings] == [comment + 1]
    assert "masked_fill(mask == 0" in lines[comment]


@pytest.mark.parametrize(
    ("text", "blocked"),
    [
        ("mask 中 True/1 表示需要屏蔽的位置", "ones"),
        ("1 表示需要屏蔽", "ones"),
        ("0 表示屏蔽", "zeros"),
        ("True = keep", "zeros"),
        ("1 for tokens to attend, 0 for padding", "zeros"),
        ("1 for tokens that are **not masked**,\n0 for tokens that are **masked**.", "zeros"),
        ("True means the position is masked out", "ones"),
        ("mask: [batch_size, 1, seq_len_k]", None),
        ("1 means masked, 1 means keep", None),
        # clauses joined by a conjunction instead of a comma (issue 20)
        ("mask: (batch, seq) with 1 for real tokens and 0 for padding", "zeros"),
        ("True where the token is padding while False marks the real ones", "ones"),
    ],
)
def test_declared_convention_is_read_from_english_and_chinese(text: str, blocked: str | None) -> None:
    assert declared_blocked(text) == blocked


# Pieces of mask comments, the separators between clauses, the characters next to which a digit
# is no value (``1.0``, ``[1]``, ``-1``) or a word is no word (``nonzero``, ``xTrue``), and the
# spellings only case-insensitive matching reads as a word (the long s of ``FALſE``).
_COMMENT_PIECES = st.sampled_from(
    ["1", "0", "True", "TRUE", "false", "FALſE", "Zero", "zeros", "non-zero", "非零", "为零", "masked",
     "attend", "not masked", "cannot attend", "padding", "keep", "屏蔽", "保留", " ", ",", ". ", " - ",
     "\n", "。", ".", "[", "]", "-", "x", "_", "2024", "for", "means", "mask"]
)
_LINE_BREAKS = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(_COMMENT_PIECES, max_size=12))
@example(pieces=["masked", " ", "1", ". ", "x"])  # the clause ends at the digit, the text goes on
@example(pieces=["FALſE", " ", "masked"])
def test_declared_blocked_rejects_quickly_only_what_no_clause_declares(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert declared_blocked(text) == _clauses_verdict(text)


@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(st.sampled_from(["x = 1", "#", " # 1 masked", "s = '#'", *_LINE_BREAKS]), max_size=12))
def test_the_comments_found_in_the_text_are_those_of_its_lines(pieces: list[str]) -> None:
    text = "".join(pieces)
    found = [comment[1] for comment in _COMMENT.finditer(text)]
    assert found == [line.split("#", 1)[1] for line in split_lines(text) if "#" in line]


@settings(max_examples=40, deadline=None)
@given(
    upper=st.booleans(),
    diagonal=st.integers(min_value=-3, max_value=3),
    as_blocked=st.booleans(),
)
def test_causal_diagonal_fires_exactly_for_the_wrong_triangle(
    upper: bool, diagonal: int, as_blocked: bool
) -> None:
    triangle = f"torch.{'triu' if upper else 'tril'}(torch.ones(T, T), diagonal={diagonal})"
    use = "m.bool()" if as_blocked else "m == 0"
    text = f"def f(s, T):\n    m = {triangle}\n    return s.masked_fill({use}, -1e4)\n"
    correct = (upper and as_blocked and diagonal == 1) or (not upper and not as_blocked and diagonal == 0)
    findings = [f for f in lint_text(text) if f.code == "ATT305"]
    assert bool(findings) != correct
    if findings and upper == as_blocked:
        leaks = diagonal > (1 if upper else 0)
        assert ("future leak" in findings[0].message) == leaks


def test_causal_diagonal_leaves_offset_diagonals_alone() -> None:
    text = (
        "def f(s, q_len, k_len, past_key_value):\n"
        "    m = torch.tril(torch.ones(q_len, k_len), diagonal=k_len - q_len)\n"
        "    return s.masked_fill(m == 0, -1e4)\n"
    )
    assert [f for f in lint_text(text) if f.code == "ATT305"] == []


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
