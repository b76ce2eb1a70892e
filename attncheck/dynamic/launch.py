"""The dynamic stage's entry: start the children first, import torch second.

Starting a child costs a Python start and ``import torch`` (over a second); so does importing
torch in the parent, which the runner needs to plan and judge, and so does the static pass.
Done one after the other they add up. ``prestart`` launches the children of a run over a few
Python files before the static pass, so that their start overlaps the linting and the parent's
own ``import torch``; ``run_dynamic`` hands each to its file, starts the children of the first
``jobs`` other files with targets before the parent imports torch, and ends the ones no file
needed (a file with no target, or more targets than a prestarted child's CPU limit allows).
This module must not import torch or numpy-heavy code itself.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attncheck.findings import Finding, TargetResult

if TYPE_CHECKING:
    from attncheck.dynamic.runner import DynamicOptions
    from attncheck.dynamic.sandbox import Limits, StartedChild
    from attncheck.static.result import FileResult

if importlib.util.find_spec("torch") is None:  # the pipeline turns this into "dynamic checks skipped"
    raise ImportError("No module named 'torch'")

PRESTART_TARGETS = 8  # a prestarted child's CPU limit allows this many targets; a file with more starts afresh

_waiting: dict[str, StartedChild] = {}  # launch.key(path) -> a child started before its file was linted
_lock = threading.Lock()


def limits_for(options: Any, targets: int) -> Limits:
    """--timeout is per target; a child runs all of a file's targets, so its limit is their sum."""
    from attncheck.dynamic.sandbox import Limits

    return Limits(timeout_s=options.timeout * max(1, targets))


def key(path: str | Path) -> str:
    """How a file's early child is found again: its resolved path."""
    return str(Path(path).resolve())


def prestart(paths: Iterable[Path], options: Any) -> None:
    """Start a child for each of ``paths`` (Python files that may have targets) now, before the
    static pass says which do. Each waits for its request; ``run_dynamic`` uses or ends it."""
    from attncheck.dynamic.sandbox import StartedChild, start_child

    for path in paths:
        started = start_child(path, limits_for(options, PRESTART_TARGETS))
        if isinstance(started, StartedChild):
            with _lock:
                _waiting.setdefault(key(path), started)


def take(path: str | Path, limits: Limits) -> StartedChild | None:
    """The child already started for ``path``, if its CPU limit covers ``limits``; used once."""
    with _lock:
        started = _waiting.pop(key(path), None)
    if started is not None and started.limits.cpu_seconds < limits.cpu_seconds:
        started.cancel()
        return None
    return started


def cancel_waiting() -> None:
    """End every started child no file took (files whose targets all failed to bind, or none)."""
    with _lock:
        children = list(_waiting.values())
        _waiting.clear()
    for child in children:
        child.cancel()


def run_dynamic(results: Sequence[FileResult], options: DynamicOptions) -> tuple[list[Finding], list[TargetResult]]:
    """``runner.run_dynamic`` with the first children already starting while torch imports."""
    from attncheck.dynamic.sandbox import StartedChild, start_child

    runnable = [r for r in results if r.targets and r.error is None]
    with _lock:
        unused = [k for k in _waiting if k not in {key(r.source.path) for r in runnable}]
        for name in unused:
            _waiting.pop(name).cancel()
        missing = [r for r in runnable if key(r.source.path) not in _waiting]
        for result in missing[: max(0, max(1, options.jobs) - len(_waiting))]:
            started = start_child(Path(result.source.path), limits_for(options, len(result.targets)))
            if isinstance(started, StartedChild):
                _waiting[key(result.source.path)] = started
    try:
        from attncheck.dynamic import runner

        return runner.run_dynamic(results, options, runner.sandbox_child(options))
    finally:
        cancel_waiting()
