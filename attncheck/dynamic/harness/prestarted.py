"""Children started before their file asks: kept by file, handed out once, ended when unused.

Both ``launch`` (which starts them early) and ``runner`` (which takes them) use this pool; it
lives on its own so that neither has to import the other. This module must not import torch.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attncheck.dynamic.harness.sandbox import Limits, StartedChild

PRESTART_TARGETS = 8  # a prestarted child's CPU limit allows this many targets; a file with more starts afresh

_waiting: dict[str, StartedChild] = {}  # key(path) -> a child started before its file was linted
_lock = threading.Lock()


def limits_for(options: Any, targets: int) -> Limits:
    """--timeout is per target; a child runs all of a file's targets, so its limit is their sum.
    The GPU is the child's when ``--device`` allows it and the machine has one."""
    from attncheck.dynamic.harness import jail
    from attncheck.dynamic.harness.sandbox import Limits

    gpu = options.device != "cpu" and bool(jail.gpu_nodes())
    return Limits(timeout_s=options.timeout * max(1, targets), gpu=gpu)


def key(path: str | Path) -> str:
    """How a file's early child is found again: its resolved path."""
    return str(Path(path).resolve())


def prestart(paths: Iterable[Path], options: Any) -> None:
    """Start a child for each of ``paths`` (Python files that may have targets) now, before the
    static pass says which do. Each waits for its request; ``launch.run_dynamic`` uses or ends it."""
    from attncheck.dynamic.harness.sandbox import StartedChild, refusal, start_child

    if refusal(options.unsafe_no_sandbox):
        return
    for path in paths:
        started = start_child(path, limits_for(options, PRESTART_TARGETS))
        if isinstance(started, StartedChild):
            with _lock:
                _waiting.setdefault(key(path), started)


def start_for(files: Sequence[tuple[Path, int]], options: Any) -> None:
    """Keep waiting only the children of ``files`` (path, number of targets), and start children
    for the first of them that have none, up to ``options.jobs`` waiting in all."""
    from attncheck.dynamic.harness.sandbox import StartedChild, refusal, start_child

    if refusal(options.unsafe_no_sandbox):
        return
    with _lock:
        unused = [k for k in _waiting if k not in {key(path) for path, _ in files}]
        for name in unused:
            _waiting.pop(name).cancel()
        missing = [(path, targets) for path, targets in files if key(path) not in _waiting]
        for path, targets in missing[: max(0, max(1, options.jobs) - len(_waiting))]:
            started = start_child(path, limits_for(options, targets))
            if isinstance(started, StartedChild):
                _waiting[key(path)] = started


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
