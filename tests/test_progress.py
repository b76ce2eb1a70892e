"""The progress line: on a terminal, after a delay, erased at the end; never on a pipe."""

from __future__ import annotations

import io
import time

from attncheck.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_long_run_on_a_terminal_shows_what_it_does():
    stream = Terminal()
    with Progress(stream, delay=0.0) as progress:
        progress.update("linted 3/40 files: model.py")
        waited = 0.0
        while "model.py" not in stream.getvalue() and waited < 10:  # a loaded machine starts threads late
            time.sleep(0.05)
            waited += 0.05
    assert "attncheck: linted 3/40 files: model.py" in stream.getvalue()


def test_a_quick_run_shows_nothing():
    stream = Terminal()
    with Progress(stream, delay=5.0) as progress:
        progress.update("linted 1/1 files: model.py")
    time.sleep(0.1)
    assert stream.getvalue() == ""


def test_a_pipe_never_gets_a_progress_line():
    stream = io.StringIO()
    with Progress(stream, delay=0.0) as progress:
        progress.update("linted 1/1 files: model.py")
        time.sleep(0.3)
    assert stream.getvalue() == ""
