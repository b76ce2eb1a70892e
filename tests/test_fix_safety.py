"""A fix never damages a file: it is applied only when the result parses and lints without a
new finding, it changes only its own span (line endings included), and files are written
atomically with their mode kept."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from attncheck.findings import Edit, Finding, Severity, Span
from attncheck.fixes import fix_source
from attncheck.sources import Source
from attncheck.static.engine import lint
from attncheck.static.rules import all_rules
from tests.test_cli import invoke

_TEXT = "import torch.nn.functional as F\ndef f(q, k):\n    s = q @ k.mT / 8\n    return F.softmax(((s)))\n"


def _finding(edit: Edit) -> Finding:
    return Finding(code="ATT202", severity=Severity.WARNING, message="m", path="x.py", span=Span(1, 1), fix=(edit,))


def test_a_fix_that_would_not_parse_is_left_out_and_says_why() -> None:
    source = Source("x.py", _TEXT)
    good = next(f for f in lint(source, all_rules()).findings if f.fix)
    bad = _finding(Edit(0, 6, "import ("))  # breaks the first line
    fixed = fix_source(source, [bad, good])
    assert fixed is not None
    assert fixed.fixed == (good,)
    ((refused, without),) = fixed.refused
    assert refused is bad and without.fix == () and "no automatic fix: the fixed code would not parse" in without.hint


def test_a_fix_that_adds_a_finding_is_left_out() -> None:
    source = Source("x.py", _TEXT)
    worse = _finding(Edit(_TEXT.index(" / 8"), _TEXT.index(" / 8") + 4, ""))  # the scale removed: ATT201
    fixed = fix_source(source, [worse])
    assert fixed is not None and fixed.fixed == ()
    assert "new finding (ATT201)" in fixed.refused[0][1].hint


def test_the_parenthesised_argument_gets_its_keyword_after_its_parentheses() -> None:
    source = Source("x.py", _TEXT)
    fixed = fix_source(source, lint(source, all_rules()).findings)
    assert fixed is not None and "F.softmax(((s)), dim=-1)" in fixed.text


def test_an_import_added_to_a_lone_cr_file_ends_in_cr() -> None:
    text = "import torch\rdef f(d):\r    return torch.sqrt(d.size(-1))\r"
    source = Source("x.py", text)
    fixed = fix_source(source, lint(source, all_rules()).findings)
    assert fixed is not None and "\n" not in fixed.text and "import math\r" in fixed.text


def test_fix_writes_atomically_and_keeps_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_text(_TEXT, encoding="utf-8")
    os.chmod(path, 0o751)
    invoke("--no-cache", "--fix", str(path))
    assert "F.softmax(((s)), dim=-1)" in path.read_text(encoding="utf-8")
    assert stat.S_IMODE(path.stat().st_mode) == 0o751
    assert [p.name for p in tmp_path.iterdir()] == ["model.py"]  # no temporary file left
