"""The grading-class repros as a class folder: fixtures/grading/class, plus s11 (a syntax error),
kept as a text file so that the suites that parse every fixture do not meet it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "grading"


@pytest.fixture(scope="session")
def grading_class(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("grading") / "class"
    shutil.copytree(FIXTURES / "class", root)
    (root / "s11").mkdir()
    shutil.copyfile(FIXTURES / "s11_syntax_error.txt", root / "s11" / "attention.py")
    return root
