"""The dynamic stage's entry: start the children first, import torch second.

Starting a child costs a Python start and ``import torch`` (over a second); so does importing
torch in the parent, which the runner needs to plan and judge. Done one after the other they
add up; here the first child of each of the first ``jobs`` files is launched before the parent
imports anything heavy, so both imports run at the same time. This module must not import
torch or numpy-heavy code itself.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attncheck.findings import Finding, TargetResult

if TYPE_CHECKING:
    from attncheck.dynamic.runner import DynamicOptions
    from attncheck.dynamic.sandbox import Limits, StartedChild
    from attncheck.static.engine import FileResult

if importlib.util.find_spec("torch") is None:  # the pipeline turns this into "dynamic checks skipped"
    raise ImportError("No module named 'torch'")


def limits_for(options: Any, targets: int) -> Limits:
    """--timeout is per target; a child runs all of a file's targets, so its limit is their sum."""
    from attncheck.dynamic.sandbox import Limits

    return Limits(timeout_s=options.timeout * max(1, targets))


def key(path: str | Path) -> str:
    """How a file's early child is found again: its resolved path."""
    return str(Path(path).resolve())


def run_dynamic(results: Sequence[FileResult], options: DynamicOptions) -> tuple[list[Finding], list[TargetResult]]:
    """``runner.run_dynamic`` with the first children already starting while torch imports."""
    from attncheck.dynamic.sandbox import StartedChild, start_child

    early: dict[str, StartedChild] = {}
    runnable = [r for r in results if r.targets and r.error is None]
    for result in runnable[: max(1, options.jobs)]:
        started = start_child(Path(result.source.path), limits_for(options, len(result.targets)))
        if isinstance(started, StartedChild):
            early[key(result.source.path)] = started
    try:
        from attncheck.dynamic import runner

        return runner.run_dynamic(results, options, runner.sandbox_child(options, early))
    finally:
        for child in early.values():  # files whose targets all failed to bind never used theirs
            child.cancel()
