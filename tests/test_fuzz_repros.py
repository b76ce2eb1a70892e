"""Every minimal file the fuzzing of issue 24 found (``tests/data/fuzz``, copied from
``shared/repros/fuzz``): each gives findings or one line of error for itself alone, within
the time limit, and the ``oob_``/``fix_``/``wrong_line_`` ones give right positions and fixes
that change only their own span."""

from __future__ import annotations

import ast
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from attncheck import pipeline
from attncheck.config import Settings
from attncheck.discovery import discover
from attncheck.fixes import fix_source
from attncheck.line_table import split_lines
from attncheck.sources import FileError, read_path
from attncheck.static import deadline
from attncheck.static.result import FileResult

FUZZ = Path(__file__).parent / "data" / "fuzz"
LIMIT_S = 4.0  # the hang_ files are stopped at this limit: the suite must not wait a minute each
FILES = sorted(p for p in FUZZ.iterdir() if p.suffix in (".py", ".ipynb"))
_CODES = pipeline.enabled_codes(Settings())
# Nesting hundreds deep takes libcst's parser from seconds to minutes on a shared machine;
# past Python's own parser's limits (200 nested brackets) it is a syntax error.
_MAY_STOP = ("hang_", "recursionerror_deep_", "recursionerror_long_")
# A syntax error is in the engine's words ("syntax error at line N: ...") or, where Python compiles the
# file itself, in Python's ("syntax error: invalid syntax", issue 19).
_STOPPED = ("static analysis stopped after", "file too deeply nested to analyse", "syntax error")


@pytest.fixture
def short_limit(monkeypatch):
    monkeypatch.setattr(deadline, "STATIC_TIME_LIMIT_S", LIMIT_S)


def _lint(*paths: Path) -> list[FileResult | FileError]:
    return list(pipeline.lint_all(discover([str(p) for p in paths]), _CODES, jobs=1))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_each_file_gives_findings_or_its_own_one_line_error(path: Path, short_limit, tmp_path) -> None:
    fine = tmp_path / "fuzz_neighbour.py"
    fine.write_text("import torch\nscores = torch.sqrt(64)\n", encoding="utf-8")
    start = time.perf_counter()
    result, neighbour = _lint(path, fine)
    assert time.perf_counter() - start < LIMIT_S + 15
    assert [f.code for f in neighbour.findings] == ["ATT204"]  # the run went on
    if path.suffix == ".ipynb":
        assert isinstance(result, FileError) and result.message.startswith("invalid notebook: cell 1")
    elif path.name.startswith(_MAY_STOP):  # slow in libcst's native parser: linted, or stopped
        assert isinstance(result, FileResult) or result.message.startswith(_STOPPED), result.message
    else:
        assert isinstance(result, FileResult) and result.error is None, result


def test_a_hang_in_native_code_is_stopped_at_the_limit(short_limit, tmp_path) -> None:
    # A word of attention, so that the prefilter hands the file to the parser that hangs on it.
    hang = tmp_path / "hang.py"
    nested = (FUZZ / "hang_libcst_match_pattern_nested_parens.py").read_text(encoding="utf-8")
    hang.write_text("# attention\n" + nested, encoding="utf-8")
    start = time.perf_counter()
    (result,) = _lint(hang)
    assert isinstance(result, FileError) and deadline.is_gave_up(result.message)
    assert time.perf_counter() - start < LIMIT_S + 10


def test_a_sum_of_twenty_thousand_terms_is_linted_on_a_deep_stack(short_limit, tmp_path) -> None:
    # Python's parser recurses past the main thread's few megabytes of C stack here, and libcst's
    # takes minutes (or crashes): the isolated child lints the fast tree on a thread with a deep stack.
    deep = tmp_path / "deep.py"
    deep.write_text("import torch\nscores = torch.sqrt(64)\ns = " + " + ".join(["q"] * 20_000) + "\n", encoding="utf-8")
    (result,) = _lint(deep)
    if sys.version_info >= (3, 12):  # ast's C recursion limit is fixed there, whatever the stack: only
        # libcst's parser is left, which takes minutes: the file ends in its own one-line error in time
        assert isinstance(result, FileError) and result.message.startswith(_STOPPED), result
        return
    assert isinstance(result, FileResult) and result.error is None, result
    assert [f.code for f in result.findings] == ["ATT204"]


def test_a_crash_of_the_isolated_analysis_is_reported_not_raised() -> None:
    with pytest.raises(deadline.CrashedError, match="SIGSEGV"):
        deadline.isolated(lambda: os.kill(os.getpid(), signal.SIGSEGV), 10)
    assert deadline.isolated(lambda: 6 * 7, 10) == 42
    with pytest.raises(ZeroDivisionError):
        deadline.isolated(lambda: 1 / 0, 10)


def test_an_internal_error_is_the_files_error_and_the_run_goes_on(tmp_path, monkeypatch) -> None:
    from attncheck.static import engine

    real = engine.lint

    def lint(source, rules):
        if "boom" in source.text:
            raise KeyError("boom")
        return real(source, rules)

    monkeypatch.setattr(engine, "lint", lint)
    monkeypatch.delenv("ATTNCHECK_DEBUG", raising=False)
    bad, fine = tmp_path / "bad.py", tmp_path / "fine.py"
    bad.write_text("boom = 1  # attention, so that the prefilter hands it to the engine\n", encoding="utf-8")
    fine.write_text("import torch\nscores = torch.sqrt(64)\n", encoding="utf-8")
    broken, linted = _lint(bad, fine)
    assert isinstance(broken, FileError) and broken.level == "error"
    assert broken.message == "internal error: KeyError: 'boom' (please report it to attncheck)"
    assert [f.code for f in linted.findings] == ["ATT204"]


def _lines_of(path: Path) -> list[str]:
    return split_lines(path.read_bytes().decode("utf-8"))


@pytest.mark.parametrize("name", [p.name for p in FILES if p.name.startswith(("oob_", "fix_", "wrong_line_",
                                                                               "indexerror_"))])
def test_positions_lie_on_the_reported_code_and_fixes_stay_in_their_span(name: str) -> None:
    path = FUZZ / name
    (result,) = _lint(path)
    assert isinstance(result, FileResult) and result.findings
    lines = _lines_of(path)
    for finding in result.findings:
        span = finding.span
        assert 1 <= span.line <= len(lines) and span.column - 1 <= len(lines[span.line - 1])
    source = read_path(path)
    fixed = fix_source(source, result.findings)
    if fixed is None:
        return
    ast.parse(fixed.text)
    edits = sorted((e for f in fixed.fixed for e in f.fix), key=lambda e: e.start)
    before, after = source.text, fixed.text
    assert before[: edits[0].start] == after[: edits[0].start]
    tail = len(before) - edits[-1].end
    assert before[len(before) - tail:] == after[len(after) - tail:]


def test_the_form_feed_moves_no_finding() -> None:
    (result,) = _lint(FUZZ / "wrong_line_formfeed_in_comment_large_file.py")
    lines = _lines_of(FUZZ / "wrong_line_formfeed_in_comment_large_file.py")
    (finding,) = result.findings
    assert lines[finding.span.line - 1].strip() == "scores = q @ k.transpose(-2, -1)"
