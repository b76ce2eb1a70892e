"""The dynamic stage's entry: start the children first, import torch second.

Starting a child costs a Python start and ``import torch`` (over a second); so does importing
torch in the parent, which the runner needs to plan and judge, and so does the static pass.
Done one after the other they add up. ``prestart`` launches the children of a run over a few
Python files before the static pass, so that their start overlaps the linting and the parent's
own ``import torch``; ``run_dynamic`` hands each to its file, starts the children of the first
``jobs`` other files with targets before the parent imports torch, and ends the ones no file
needed (a file with no target, or more targets than a prestarted child's CPU limit allows).
The started children wait in ``prestarted``. This module must not import torch or numpy-heavy
code itself.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from attncheck.dynamic.harness.prestarted import cancel_waiting, prestart, start_for
from attncheck.findings import Finding, TargetResult

if TYPE_CHECKING:
    from attncheck.dynamic.runner import DynamicOptions
    from attncheck.static.result import FileResult

if importlib.util.find_spec("torch") is None:  # the pipeline turns this into "dynamic checks skipped"
    raise ImportError("No module named 'torch'")

__all__ = ["cancel_waiting", "prestart", "run_dynamic"]


def run_dynamic(results: Sequence[FileResult], options: DynamicOptions) -> tuple[list[Finding], list[TargetResult]]:
    """``runner.run_dynamic`` with the first children already starting while torch imports."""
    runnable = [r for r in results if r.targets and r.error is None]
    start_for([(Path(r.source.path), len(r.targets)) for r in runnable], options)
    try:
        from attncheck.dynamic import runner

        return runner.run_dynamic(results, options, runner.sandbox_child(options))
    finally:
        cancel_waiting()
