"""The pre-parse reduction of large files keeps attention code and real line numbers."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attncheck.config import Settings
from attncheck.pipeline import _rules, enabled_codes
from attncheck.sources import Source
from attncheck.static.engine import lint
from attncheck.static.rules.att2_scores.sqrt_of_number import SqrtOfNumber
from attncheck.static.tree.regions import MIN_LINES, attention_regions

ATTENTION = textwrap.dedent('''
    class Attention(nn.Module):
        """Attention with a mistake far down a large file."""

        def __init__(self, d_model, num_heads):
            super().__init__()
            self.d_k = d_model // num_heads

        def helper(self, x):
            # not attention
            y = x + 1
            y = y * 2
            y = y - 3
            y = y / 4
            return y

        def forward(self, q, k, v):
            scores = torch.matmul(q, k.transpose(-2, -1)) / torch.sqrt(64)
            return torch.softmax(scores, dim=-1) @ v
''')

FILLER = textwrap.dedent('''
    @decorator(
        name="x",
    )
    class Filler{n}(nn.Module):
        """Docstring with a line that looks like code:
    class NotAClass:
        """

        def forward(self, x):
            # a comment
            x = self.a(x)
            x = self.b(x)
            x = self.c(x)
            x = self.d(x)
            x = self.e(x)
            x = self.f(x)
            return x
''')


def _large_file(position: int, fillers: int = 40) -> str:
    parts = ["import torch\nimport torch.nn as nn\n"]
    parts += [FILLER.format(n=n) for n in range(fillers)]
    parts.insert(position + 1, ATTENTION)
    return "".join(parts)


def test_small_files_are_parsed_whole():
    assert attention_regions("x = 1\n" * (MIN_LINES - 1)) is None


@settings(max_examples=25, deadline=None)
@given(position=st.integers(min_value=0, max_value=40))
def test_kept_lines_map_back_to_the_same_text(position):
    text = _large_file(position)
    reduced = attention_regions(text)
    assert reduced is not None
    original = text.splitlines()
    for kept, number in zip(reduced.text.splitlines(), reduced.lines, strict=True):
        assert original[number - 1] == kept
    assert "def forward(self, q, k, v):" in reduced.text
    assert "self.d_k = d_model // num_heads" in reduced.text  # __init__ is kept
    assert "Filler" not in reduced.text and "def helper" not in reduced.text
    assert reduced.text.count("\n") < len(original) // 4


def test_small_files_are_told_by_their_lines_not_their_length():
    assert attention_regions("x = 1\n" * (MIN_LINES - 1) + "y = 2") is not None  # a last line without \n
    assert attention_regions("x = 1\n" * (MIN_LINES - 1)) is None
    assert attention_regions("x = 1\r" * MIN_LINES) is not None  # lines broken at \r only


COMMENTED = textwrap.dedent('''
    def attend(q, k):
        # a comment-only line
    \t  # another, indented with a tab
        s = "# not a comment" + q  # a comment after code
        return torch.softmax(s @ k, dim=-1)''')


@pytest.mark.parametrize("first", [True, False])
def test_comment_only_lines_go_and_the_last_line_stays(first):
    """The attention code first in the file (no newline before its first line) or last
    (none after its last), with comment-only lines and ``#`` in code inside."""
    fillers = "".join(FILLER.format(n=n) for n in range(MIN_LINES // 10))
    text = COMMENTED.lstrip("\n") + "\n" + fillers if first else "import torch\n" + fillers + COMMENTED
    reduced = attention_regions(text)
    assert reduced is not None and reduced.definitions is not None
    original = text.splitlines()
    kept = reduced.text.splitlines()
    assert [original[number - 1] for number in reduced.lines] == kept
    assert not any(line.lstrip().startswith("#") for line in kept)
    assert '    s = "# not a comment" + q  # a comment after code' in kept
    assert "    return torch.softmax(s @ k, dim=-1)" in kept
    assert first or reduced.text.endswith("dim=-1)")  # the file's last line, as it is
    line, offset = reduced.definitions[False, "attend"]
    assert original[line - 1] == "def attend(q, k):" and text.startswith("def attend", offset)


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
def test_other_line_breaks_keep_the_same_lines(newline):
    text = _large_file(5)
    reduced = attention_regions(text)
    other = attention_regions(text.replace("\n", newline))
    assert reduced is not None and other is not None
    assert other.lines == reduced.lines
    assert other.text == reduced.text.replace("\n", newline)


@settings(max_examples=10, deadline=None)
@given(position=st.integers(min_value=0, max_value=40), newline=st.sampled_from(["\n", "\r\n"]))
def test_the_scan_tells_where_each_top_level_definition_starts(position, newline):
    text = _large_file(position).replace("\n", newline)
    reduced = attention_regions(text)
    expected: dict[tuple[bool, str], int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        match = re.match(r"(class|def)\s+(\w+)", line)
        if match and match.group(2) != "NotAClass":  # that one is in a docstring
            expected.setdefault((match.group(1) == "class", match.group(2)), number)
    assert reduced is not None and reduced.definitions is not None
    assert {key: line for key, (line, _) in reduced.definitions.items()} == expected
    for (is_class, name), (line, offset) in reduced.definitions.items():
        assert text.startswith(f"{'class' if is_class else 'def'} {name}", offset)
        assert text.count("\n", 0, offset) + 1 == line


def test_lines_broken_at_a_bare_carriage_return_have_no_definitions():
    reduced = attention_regions(_large_file(5).replace("\n", "\r"))
    assert reduced is not None and reduced.definitions is None


@settings(max_examples=10, deadline=None)
@given(position=st.integers(min_value=0, max_value=40))
def test_findings_in_a_reduced_file_point_at_the_real_line(position):
    text = _large_file(position)
    result = lint(Source("big.py", text), [SqrtOfNumber])
    expected = next(i for i, line in enumerate(text.splitlines(), 1) if "torch.sqrt(64)" in line)
    assert [f.line for f in result.findings] == [expected]


def test_when_the_kept_part_does_not_parse_the_whole_file_is_linted(monkeypatch):
    from attncheck.static import engine
    from attncheck.static.tree.regions import Reduced

    monkeypatch.setattr(engine, "attention_regions", lambda text: Reduced("def broken(:\n", (1,)))
    text = _large_file(3)
    result = lint(Source("big.py", text), [SqrtOfNumber])
    assert result.error is None and len(result.findings) == 1


_FIXTURES = sorted(
    path
    for folder in ("correct", "buggy", "seeds")
    for path in (Path(__file__).resolve().parents[2] / "fixtures" / folder).glob("*.py")
)


@pytest.mark.parametrize("path", _FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_reducing_a_file_changes_no_finding(path):
    """The same code linted whole and as part of a large (reduced) file gives the same findings."""
    text = path.read_text(encoding="utf-8")
    padded = text + "\n" + "".join(FILLER.format(n=n) for n in range(MIN_LINES // 10))
    assert attention_regions(padded) is not None
    rules = _rules(enabled_codes(Settings()))
    whole = {(f.code, f.line, f.message) for f in lint(Source("f.py", text), rules).findings}
    reduced = {(f.code, f.line, f.message) for f in lint(Source("f.py", padded), rules).findings}
    assert reduced == whole


def test_only_imports_of_names_the_kept_code_uses_are_kept():
    header = (
        "import torch\nimport torch.nn.functional as F\nfrom ...utils import logging, auto_docstring\n"
        "from .configuration import UnusedConfig\ntry:\n    import flash_attn\nexcept ImportError:\n    pass\n"
        "from foo import *\n"
    )
    code = "@auto_docstring\ndef attend(q, k):\n    return F.softmax(q @ k, dim=-1)\n"
    text = header + code + "".join(FILLER.format(n=n) for n in range(MIN_LINES // 10))
    reduced = attention_regions(text)
    assert reduced is not None
    kept = reduced.text
    assert "import torch.nn.functional as F" in kept and "auto_docstring" in kept.split("\n@")[0]
    assert "import flash_attn" in kept and "from foo import *" in kept
    assert "UnusedConfig" not in kept and "import torch\n" not in kept


COVERAGE = textwrap.dedent('''
    class Attention(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.q_proj = nn.Linear(d, d)
            self.dropout = nn.Dropout(0.1)

        def _project_again(self, x):
            return self.q_proj(x)

        def forward(self, x):
            return self._attend(self.q_proj(x))

        def _attend(self, q):
            return torch.softmax(q @ q.transpose(-2, -1), dim=-1)

        def _project_once_more(self, x):
            return self.q_proj(x)

        def _drop(self, x):
            return self.dropout(x)
''')


def test_a_member_is_kept_for_a_built_module_only_when_no_kept_member_uses_it():
    fillers = "".join(FILLER.format(n=n) for n in range(MIN_LINES // 10))
    text = "import torch\nimport torch.nn as nn\n" + COVERAGE + fillers
    reduced = attention_regions(text)
    assert reduced is not None
    kept = reduced.text
    assert "def forward" in kept and "def _attend" in kept and "def __init__" in kept
    assert "def _drop" in kept  # the only use of self.dropout
    assert "def _project_again" not in kept and "def _project_once_more" not in kept  # forward uses q_proj


def test_a_mask_tiled_by_a_head_count_keeps_its_class():
    """ATT306's mistake lives in classes with no other attention word (the mask widened for
    nn.MultiheadAttention): a ``.repeat``/``tile`` by a head count keeps the class; one by other
    counts does not."""
    tiled = textwrap.dedent('''
        class PaddedMixer(nn.Module):
            def __init__(self, d, nhead):
                super().__init__()
                self.nhead = nhead
                self.mixer = nn.MultiheadAttention(d, nhead, batch_first=True)

            def forward(self, x, pad_mask):
                b, t, _ = x.shape
                m = pad_mask.unsqueeze(1).expand(b, t, t).repeat(self.nhead, 1, 1)
                return self.mixer(x, x, x, attn_mask=m)[0]


        class Tiler(nn.Module):
            def forward(self, x):
                return torch.tile(x.repeat(1, 2), (3, 1))
    ''')
    text = "import torch\nimport torch.nn as nn\n" + tiled + "".join(FILLER.format(n=n) for n in range(MIN_LINES // 10))
    reduced = attention_regions(text)
    assert reduced is not None
    assert "class PaddedMixer" in reduced.text and ".repeat(self.nhead, 1, 1)" in reduced.text
    assert "class Tiler" not in reduced.text
    findings = lint(Source("f.py", text), _rules(enabled_codes(Settings()))).findings
    assert [(f.code, f.line) for f in findings] == [("ATT306", text[: text.index("m = pad_mask")].count("\n") + 1)]


def test_attention_words_in_docstrings_and_comment_lines_keep_nothing():
    """Every output class of a model file says "attention softmax" in its docstring, and
    comments name what the next lines do: neither is attention code. A word after code on
    its line still counts (``x = y  # softmax later``), and code itself always does."""
    said = textwrap.dedent('''
        class ModelOutput(Base):
            """Attention weights after the attention softmax, used to compute the weighted average."""

            attentions: tuple | None = None


        class Block(nn.Module):
            def forward(self, x):
                # attention: either the linear or the softmax variant
                return self.mixer(x)


        class Quoted(nn.Module):
            def forward(self, x):
                x = self.norm(x)
                \'\'\'
                scores.softmax(dim=-1), then masked_fill and tril ... @ v
                \'\'\'
                return x
    ''')
    coded = textwrap.dedent('''
        class TrailingComment(nn.Module):
            def forward(self, x):
                return self.mixer(x)  # softmax inside


        class Coded(nn.Module):
            def forward(self, s):
                return s.softmax(dim=-1)  # """
    ''')
    fillers = "".join(FILLER.format(n=n) for n in range(MIN_LINES // 10))
    reduced = attention_regions("import torch\n" + said + coded + fillers)
    assert reduced is not None
    kept = reduced.text
    assert "class ModelOutput" not in kept and "class Block" not in kept and "class Quoted" not in kept
    assert "class TrailingComment" in kept and "class Coded" in kept
