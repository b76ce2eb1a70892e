"""A progress line on a terminal, for runs long enough to wonder about (over a second).

A dynamic run takes tens of seconds; without a word on screen it looks hung. The line
goes to stderr, only when stderr is a terminal, appears only once the run has lasted
``delay`` seconds (a quick run never flickers) and is erased when the run ends, so it
never mixes with the report or with output that is piped or redirected.
"""

from __future__ import annotations

import sys
import threading
from types import TracebackType
from typing import TextIO

DELAY_S = 1.0


class Progress:
    """``with Progress() as progress: progress.update("linting 3/40 files")``."""

    def __init__(self, stream: TextIO | None = None, *, delay: float = DELAY_S) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.delay = delay
        self.message = "attncheck: starting"
        self._lock = threading.Lock()
        self._status = None
        self._timer: threading.Timer | None = None
        self._done = False

    def __enter__(self) -> Progress:
        if is_terminal(self.stream):
            self._timer = threading.Timer(self.delay, self._show)
            self._timer.daemon = True
            self._timer.start()
        return self

    def _show(self) -> None:
        from rich.console import Console

        with self._lock:
            if self._done:
                return
            console = Console(file=self.stream, highlight=False)
            self._status = console.status(self.message, spinner="dots")
            self._status.start()

    def update(self, message: str) -> None:
        """Say what the run is doing now (cheap when nothing is shown)."""
        self.message = f"attncheck: {message}"
        with self._lock:  # else the line could start with the message before this one, and keep it
            if self._status is not None:
                self._status.update(self.message)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        with self._lock:
            self._done = True
            if self._timer is not None:
                self._timer.cancel()
            if self._status is not None:
                self._status.stop()


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal; a closed or odd stream is not."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
