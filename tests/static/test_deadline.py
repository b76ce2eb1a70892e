"""A file whose static analysis runs away is stopped with a clear message; the others are linted."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from attncheck import pipeline
from attncheck.config import Settings
from attncheck.discovery import discover
from attncheck.sources import FileError
from attncheck.static import deadline, engine
from attncheck.static.result import FileResult

SLOW_MARK = "# analysis of this softmax never ends"  # a word the prefilter passes: the engine sees it


def test_the_limit_interrupts_a_slow_body():
    start = time.perf_counter()
    with pytest.raises(deadline.TimeLimitError), deadline.time_limit(0.2):
        time.sleep(5)
    assert time.perf_counter() - start < 2


def test_a_fast_body_is_left_alone_and_the_timer_is_cleared():
    with deadline.time_limit(0.5):
        pass
    time.sleep(0.7)  # a timer left running would raise here


@pytest.fixture
def runaway_engine(monkeypatch):
    """The engine hangs on files carrying SLOW_MARK, as a missed bound in a rule would."""
    real = engine.lint

    def lint(source, rules):
        if SLOW_MARK in source.text:
            time.sleep(30)
        return real(source, rules)

    monkeypatch.setattr(engine, "lint", lint)
    monkeypatch.setattr(deadline, "STATIC_TIME_LIMIT_S", 0.3)


def _lint(paths: list[Path], tmp_path: Path, monkeypatch, use_cache: bool) -> list[FileResult | FileError]:
    monkeypatch.setenv("ATTNCHECK_CACHE_DIR", str(tmp_path / "cache"))
    codes = pipeline.enabled_codes(Settings())
    cache = pipeline.open_cache(codes) if use_cache else None
    return list(pipeline.lint_all(discover([str(p) for p in paths]), codes, jobs=1, cache=cache))


@pytest.mark.parametrize("use_cache", [False, True])
def test_a_runaway_file_is_one_error_and_the_others_are_still_linted(
    tmp_path, monkeypatch, runaway_engine, use_cache
):
    slow = tmp_path / "slow.py"
    slow.write_text(f"{SLOW_MARK}\nx = 1\n")
    fine = tmp_path / "fine.py"
    fine.write_text("import torch\nscores = torch.sqrt(64)\n")
    start = time.perf_counter()
    results = _lint([slow, fine], tmp_path, monkeypatch, use_cache)
    assert time.perf_counter() - start < 10
    by_path = {Path(r.path if isinstance(r, FileError) else r.source.path).name: r for r in results}
    assert isinstance(by_path["slow.py"], FileError)
    assert deadline.is_gave_up(by_path["slow.py"].message)
    assert [f.code for f in by_path["fine.py"].findings] == ["ATT204"]


def test_a_runaway_file_is_not_cached(tmp_path, monkeypatch, runaway_engine):
    slow = tmp_path / "slow.py"
    slow.write_text(f"{SLOW_MARK}\nx = 1\n")
    _lint([slow], tmp_path, monkeypatch, use_cache=True)
    monkeypatch.setattr(deadline, "STATIC_TIME_LIMIT_S", 60.0)
    slow.write_text(f"{SLOW_MARK}\nx = 1\n")
    monkeypatch.setattr(engine, "lint", lambda source, rules: FileResult(source))
    (result,) = _lint([slow], tmp_path, monkeypatch, use_cache=True)
    assert isinstance(result, FileResult)
