"""A time limit on the static analysis of one file.

The rules follow values through user code with bounded walks, but a bound that
was missed turns one odd file into a linter that never returns, and in a
pre-commit hook that is a frozen commit. ``time_limit`` turns such a file into
a one-line error instead, so the other files are still reported. It uses the
interval timer, which only the main thread of a process can set: pool workers
run their work there; elsewhere (a thread, Windows) the analysis is unlimited.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

STATIC_TIME_LIMIT_S = 60.0
_GAVE_UP = "static analysis stopped after"


class TimeLimitError(Exception):
    """The analysis of one file ran past its time limit."""


def gave_up(seconds: float) -> str:
    """The one-line reason reported for a file whose analysis was stopped."""
    return f"{_GAVE_UP} {seconds:g} s on this file (please report it to attncheck)"


def is_gave_up(reason: str | None) -> bool:
    """Whether a file's error is a time limit (machine-dependent, so never cached)."""
    return reason is not None and reason.startswith(_GAVE_UP)


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise TimeLimitError in the body once ``seconds`` have passed (where a timer can be set)."""
    if seconds <= 0 or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise TimeLimitError

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
