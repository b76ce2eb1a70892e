"""The prefilter passes over only what could give nothing, and reads the rules' words right."""

from __future__ import annotations

from pathlib import Path

import pytest

from attncheck.prefilter import could_have_findings, rule_words
from attncheck.sources import read_path
from attncheck.static.rules import all_rules
from tests.conftest import lint_text
from tests.test_cli import ROOT, subprocess_run

FIXTURES = ROOT / "fixtures"
FILES = sorted(p for folder in ("correct", "buggy", "seeds") for p in (FIXTURES / folder).glob("*.py"))


def test_the_words_read_from_the_rules_sources_are_the_rules_words():
    assert rule_words() == frozenset(word for rule in all_rules() for word in rule.PREFILTER)


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_fixture_with_a_finding_or_a_target_is_passed_over(path: Path):
    source = read_path(path)
    if not could_have_findings(source.text):
        from attncheck.static.engine import lint

        result = lint(source, all_rules())
        assert (result.findings, result.targets) == ([], [])


def test_a_file_without_attention_is_passed_over_and_one_with_a_rule_word_is_not():
    plain = "import os\n\n\ndef load(path):\n    with open(path) as f:\n        return [row.split(',') for row in f]\n"
    assert not could_have_findings(plain)
    assert lint_text(plain) == []
    assert could_have_findings("import torch\nx = torch.sqrt(64)\n")
    assert could_have_findings("class Block:\n    def __init__(self):\n        self.attn = make()\n")


def test_a_file_passed_over_never_imports_the_parser(tmp_path):
    (tmp_path / "plain.py").write_text("import os\n\nprint(os.getcwd())\n")
    run = subprocess_run("-X", "importtime", "-m", "attncheck", "--static-only", "--no-cache",
                         "--output-format", "concise", "plain.py", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}
    assert not {name for name in imported if name.startswith(("libcst", "attncheck.static.engine", "torch"))}

