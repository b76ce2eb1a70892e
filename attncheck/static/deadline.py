"""A time limit on the static analysis of one file.

The rules follow values through user code with bounded walks, but a bound that
was missed turns one odd file into a linter that never returns, and in a
pre-commit hook that is a frozen commit. ``time_limit`` turns such a file into
a one-line error instead, so the other files are still reported. It uses the
interval timer, which only the main thread of a process can set: pool workers
run their work there; elsewhere (a thread, Windows) the analysis is unlimited.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

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


class CrashedError(Exception):
    """The process analysing one file died (a crash in native code, or killed for its memory)."""


# What an isolated analysis may allocate beyond what its process held when it started.
ISOLATED_MEMORY_BYTES = 4 << 30


def can_isolate() -> bool:
    """Whether ``isolated`` runs its function in a child process here (it needs ``fork``)."""
    return hasattr(os, "fork") and hasattr(os, "waitpid")


def isolated(function: Callable[[], T], seconds: float) -> T:
    """``function()``, run in a forked child that is killed once ``seconds`` have passed.

    libcst's parser is native code: on some inputs (nested ``match`` patterns, chains of
    thousands of operators) it runs for minutes and takes gigabytes, and neither the interval
    timer nor ``KeyboardInterrupt`` stops it, so the analysis of such a file runs where it can
    be killed, with its memory bounded (``ISOLATED_MEMORY_BYTES``). A fork shares the parent's
    imported linter, so it starts in milliseconds. Raises TimeLimitError past ``seconds`` (or
    when the caller's own ``time_limit`` expires while waiting), CrashedError when the child
    dies, and what ``function`` raised, when it can be pickled (else a RuntimeError naming it).
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        _run_child(function, write_end)
    os.close(write_end)
    try:
        data = _read_until(read_end, time.monotonic() + seconds)
    except BaseException:
        os.kill(pid, signal.SIGKILL)
        raise
    finally:
        os.close(read_end)
        status = os.waitpid(pid, 0)[1]
    if not data:
        code = os.waitstatus_to_exitcode(status)
        why = f"signal {-code} ({signal.Signals(-code).name})" if code < 0 else f"exit status {code}"
        raise CrashedError(why)
    kind, value = pickle.loads(data)
    if kind == "raised":
        raise value
    return value


def _run_child(function: Callable[[], object], write_end: int) -> None:
    """In the forked child: run ``function`` with its memory bounded, send back what it returned
    or raised, and exit without running the parent's exit handlers."""
    try:
        _bound_memory(ISOLATED_MEMORY_BYTES)
        try:
            answer = pickle.dumps(("returned", function()))
        except BaseException as error:
            answer = pickle.dumps(("raised", _portable(error)))
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(answer)
    finally:
        os._exit(0)


def _portable(error: BaseException) -> BaseException:
    """``error`` if it can be pickled, else a RuntimeError that names it (a KeyError keyed by a
    syntax tree thousands deep can be neither pickled nor printed)."""
    try:
        pickle.dumps(error)
        return error
    except BaseException:
        kind = RecursionError if after_recursion(error) else RuntimeError  # a pickle keeps no __cause__
        return kind(type(error).__name__)


def after_recursion(error: BaseException) -> bool:
    """Whether ``error`` was raised while handling a RecursionError (or is one)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, RecursionError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _bound_memory(extra: int) -> None:
    """Let this process map at most ``extra`` bytes more than it has mapped now (Linux)."""
    try:
        import resource

        with open("/proc/self/statm", encoding="ascii") as statm:
            mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (ImportError, OSError, ValueError):
        return
    resource.setrlimit(resource.RLIMIT_AS, (mapped + extra, mapped + extra))


def _read_until(fd: int, end: float) -> bytes:
    """Everything written to ``fd`` until its writer closes it; TimeLimitError at ``end``."""
    chunks = []
    while True:
        left = end - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeLimitError
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
