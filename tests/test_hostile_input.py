"""Inputs Python accepts but nobody writes: values computed from themselves, nesting a
thousand deep, malformed notebooks, FIFOs. Each is linted, or is its own file's one-line
error, and never stops the run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from attncheck import pipeline
from attncheck.config import Settings
from attncheck.discovery import discover
from attncheck.sources import FileError, Source, read_path
from tests.conftest import lint_text


@pytest.mark.parametrize(
    "text",
    [
        "def f(d):\n    d /= torch.sqrt(d)\n",
        "import torch\ndef f():\n    a = b + 1\n    b = a * 2\n    return torch.sqrt(a)\n",
        "def f(q, k):\n    a = b / torch.sqrt(a)\n    b = a * 2\n    return (q @ k.mT / a).softmax(-1)\n",
    ],
    ids=["self", "two names", "in a scale"],
)
def test_a_value_computed_from_itself_ends_the_walk(text: str) -> None:
    lint_text(text)


_DEEP = 1_000


@pytest.mark.parametrize(
    "text",
    [
        "def f(q, k):\n    s = " + " + ".join(["q"] * _DEEP) + "\n    return (q @ k).softmax(-1)\n",
        "y = s" + ".view(1)" * 300 + "\n",
        "y = " + "[" * 150 + "]" * 150 + "\n",
        "y = s" + "[0]" * 300 + "\n",
        "y = " + "-" * _DEEP + "1\n",
    ],
    ids=["long sum", "call chain", "nested lists", "subscripts", "unary chain"],
)
def test_deep_nesting_python_parses_is_linted_or_its_files_error(text: str) -> None:
    """The walker is a loop; libcst's code generation (positions) still recurses, so a finding
    deep in a thousand-term sum may make the file ``too deeply nested``, never the run's error."""
    _, _, error = pipeline.lint_source(Source("deep.py", text), pipeline.enabled_codes(Settings()))
    assert error is None or error.startswith("file too deeply nested to analyse"), error


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        ([{"cell_type": "code", "source": [1]}], "cell 1's source is not text"),
        ([{"cell_type": "code", "source": {"a": 1}}], "cell 1's source is not text"),
        ([{"cell_type": "markdown", "source": "x"}, {"cell_type": "code", "source": "x = '\ud800'"}],
         "cell 2 holds a lone surrogate"),
    ],
    ids=["list of ints", "dict", "lone surrogate"],
)
def test_a_malformed_notebook_is_its_own_error(tmp_path: Path, cells: list, message: str) -> None:
    path = tmp_path / "bad.ipynb"
    path.write_text(json.dumps({"cells": cells}), encoding="utf-8")
    found = read_path(path)
    assert isinstance(found, FileError)
    assert message in found.message


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_never_opened(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "ok.py").write_text("x = 1\n", encoding="utf-8")
    walked = list(discover([str(tmp_path)]))
    notes = [item for item in walked if isinstance(item, FileError)]
    assert [(Path(n.path).name, n.level) for n in notes] == [("pipe.py", "note")]
    assert "FIFO" in notes[0].message
    assert len(walked) == 2  # ok.py is still checked
    named = read_path(tmp_path / "pipe.py")  # would block forever if opened
    assert isinstance(named, FileError) and named.level == "error" and "FIFO" in named.message


def test_nesting_past_pythons_parser_is_its_syntax_error_at_once() -> None:
    """libcst's parser takes minutes to reject a call nested 600 deep; Python's says it at once."""
    text = "def attention(s):\n    x = " + "f(" * 600 + "s" + ")" * 600 + "\n    return x\x0c\n"
    _, _, error = pipeline.lint_source(Source("deep.py", text), pipeline.enabled_codes(Settings()))
    assert error == "syntax error at line 2: too many nested parentheses (Python's own parser rejects the file)"


def test_a_syntax_error_libcst_is_slow_to_find_is_pythons(monkeypatch) -> None:
    """Found by bench/fuzz.py: a 1,100-call chain with a syntax error after it kept libcst's
    parser busy past the time limit; Python's parser had said what was wrong at once."""
    from attncheck.static import engine

    monkeypatch.setattr(engine, "SYNTAX_ERROR_BUDGET_S", 0.5)
    text = "deep = s" + ".view(1)" * 1100 + " x\n"
    _, _, error = pipeline.lint_source(Source("deep.py", text), pipeline.enabled_codes(Settings()))
    assert error is not None and error.startswith("syntax error at line 1: ")
    assert error.endswith("(Python's own parser rejects the file)")
