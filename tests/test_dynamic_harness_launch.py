"""Children started early: before the static pass (``launch.prestart``), handed to their file once,
ended when no file takes them; and the parent judges with one intra-op thread.

The sandbox is replaced by a stand-in that starts no process, so these run in milliseconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attncheck import pipeline
from attncheck.config import Settings
from attncheck.discovery import Candidate
from attncheck.dynamic import launch, runner
from attncheck.dynamic.harness import prestarted, sandbox
from attncheck.dynamic.harness.sandbox import Limits, StartedChild
from tests.dynamic_support import FIXTURES, Options, file_result, in_process_child

ROOT = Path(__file__).resolve().parents[1]
TYPICAL = FIXTURES / "correct" / "dyn_self_attention.py"


class StandIn(StartedChild):
    """A started child with no process: records whether it was cancelled."""

    def __init__(self, module_path: Path, limits: Limits, isolation: str = "stand-in") -> None:
        self.module_path, self.limits, self.isolation = Path(module_path).resolve(), limits, isolation
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


@pytest.fixture
def started(monkeypatch) -> list[StandIn]:
    children: list[StandIn] = []

    def start_child(path: Path, limits: Limits) -> StandIn:
        children.append(StandIn(path, limits))
        return children[-1]

    monkeypatch.setattr(sandbox, "start_child", start_child)
    yield children
    prestarted.cancel_waiting()


def test_a_prestarted_child_is_taken_once_by_its_file(started):
    prestarted.prestart([TYPICAL], Options())
    needed = prestarted.limits_for(Options(), 1)
    assert prestarted.take(str(TYPICAL), needed) is started[0]
    assert prestarted.take(TYPICAL, needed) is None
    assert not started[0].cancelled


def test_a_file_needing_more_cpu_than_the_prestarted_limit_gets_a_fresh_child(started):
    prestarted.prestart([TYPICAL], Options())
    assert prestarted.take(TYPICAL, prestarted.limits_for(Options(), prestarted.PRESTART_TARGETS + 1)) is None
    assert started[0].cancelled


def _items(*paths: Path) -> list[Candidate]:
    return [Candidate(p, str(p), True) for p in paths]


def test_the_run_ends_prestarted_children_no_file_took(started, monkeypatch, tmp_path):
    monkeypatch.setattr(
        launch, "run_dynamic", lambda results, options: runner.run_dynamic(results, options, in_process_child)
    )
    no_target = tmp_path / "helpers.py"
    no_target.write_text("SIZE = 4\n")
    outcome, _ = pipeline.run(_items(TYPICAL, no_target), Settings(root=ROOT), static_only=False, jobs=2)
    assert [t.status for t in outcome.targets] == ["passed"]
    assert sorted(c.module_path.name for c in started) == sorted([TYPICAL.name, no_target.name])
    assert all(c.cancelled for c in started)  # the in-process run took none: none is left running


def test_a_static_only_run_starts_no_child(started):
    pipeline.run(_items(TYPICAL), Settings(root=ROOT), static_only=True, jobs=2)
    assert started == []


def test_no_child_starts_early_for_more_files_than_jobs(started, tmp_path):
    other = tmp_path / "other.py"
    other.write_text("SIZE = 4\n")
    assert pipeline._prestart(_items(TYPICAL, other), Settings(root=ROOT), jobs=1) is None
    assert started == []


def test_the_parent_uses_one_intra_op_thread_and_restores_the_count():
    seen = []

    def child(path, request, tensors):
        seen.append(torch.get_num_threads())  # as the parent left it: the stand-in child sets its own
        return in_process_child(path, request, tensors)

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        runner.run_dynamic([file_result(TYPICAL)], Options(), child)
        assert seen == [1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
