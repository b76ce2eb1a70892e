"""Hand the submissions to warm workers and store each grade as it arrives.

Up to ``jobs`` worker processes are started once (spawned, each importing torch once); each
grades one submission at a time (``record.grade_one``: stage, fork a jailed child, score). With
one job, or a class too small to repay a worker's start, the grading happens in this process.
With ``dask_scheduler`` the submissions go to an existing Dask distributed cluster instead: each
of its workers runs the same ``grade_one`` (so the same jail), and the gradebook stays here with
the client. Grades already in the
gradebook for the same content and assignment are reused unless ``rerun``.
"""

from __future__ import annotations

import multiprocessing
import secrets
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from attncheck.dynamic.harness import rundir
from attncheck.grade import worker
from attncheck.grade.assignment import Assignment
from attncheck.grade.gradebook import Gradebook
from attncheck.grade.record import Grade, grade_one
from attncheck.grade.submissions import Submission

Progress = Callable[[Grade], None]
# A worker's start (a Python, import torch) costs about what grading this many submissions does
# (measured: 2-8 s against 0.2-0.5 s each): a small class is graded in this process, warm once.
SUBMISSIONS_PER_WORKER = 16


@dataclass(frozen=True)
class Plan:
    """One grading run: what to grade, against what, where, how."""

    submissions: list[Submission]
    assignment: Assignment
    out: Path
    seed: int
    jobs: int = 1
    rerun: bool = False
    dask_scheduler: str | None = None
    unsafe_no_sandbox: bool = False  # run unjailed where the kernel refuses the namespaces


def draw_seed() -> int:
    """A fresh seed per run, so a submission cannot special-case the grader's inputs."""
    return secrets.randbelow(2**31)


def run(plan: Plan, progress: Progress | None = None) -> list[Grade]:
    """Every submission's grade, in the submissions' order: stored ones reused, the rest graded."""
    book = Gradebook(plan.out)
    try:
        stored = {} if plan.rerun else {
            _key(s): found for s in plan.submissions
            if (found := book.get(s.digest, plan.assignment.digest, s.student)) is not None
        }
        todo = [s for s in plan.submissions if _key(s) not in stored]
        run_id = book.start_run(plan.assignment.digest, plan.seed, len(plan.submissions), len(todo))
        grades = dict(stored)
        for grade in stored.values():
            if progress is not None:
                progress(grade)
        for grade in _graded(plan, todo):
            book.put(grade, plan.assignment.digest)
            grades[(grade.student, grade.digest)] = grade
            if progress is not None:
                progress(grade)
        book.finish_run(run_id)
    finally:
        book.close()
    return [grades[_key(s)] for s in plan.submissions]


def _key(submission: Submission) -> tuple[str, str]:
    """Two students may hand in the same bytes: a grade is theirs by name and content."""
    return submission.student, submission.digest


def _graded(plan: Plan, todo: list[Submission]) -> Iterator[Grade]:
    if not todo:
        return
    if plan.dask_scheduler is not None:
        yield from _on_dask(plan, todo)
        return
    # Every student's code is staged in a run folder (a neutral name: the child sees its own path
    # below it), locked while this run lives and swept by the next run if this one is killed.
    staging = rundir.create()
    try:
        workers = min(plan.jobs, max(1, len(todo) // SUBMISSIONS_PER_WORKER))
        if workers == 1:
            dynamic = worker.warm_up()
            for submission in todo:
                yield grade_one(submission, plan.assignment, plan.seed, staging.work, dynamic,
                                plan.unsafe_no_sandbox)
            return
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=context, initializer=worker.warm_up) as pool:
            futures = [
                pool.submit(grade_one, s, plan.assignment, plan.seed, staging.work, _has_torch(),
                            plan.unsafe_no_sandbox)
                for s in todo
            ]
            for future in as_completed(futures):
                yield future.result()
    finally:
        staging.remove()


def _has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def _on_dask(plan: Plan, todo: list[Submission]) -> Iterator[Grade]:
    """Each submission as a task of the cluster at ``plan.dask_scheduler`` (extra ``grade-dask``).

    The workers must see the submissions' paths (a shared folder, as for any grader)."""
    try:
        from distributed import Client
        from distributed import as_completed as dask_completed
    except ImportError as error:
        raise RuntimeError("--dask-scheduler needs dask: pip install 'attncheck[grade-dask]'") from error
    with Client(plan.dask_scheduler) as client:
        futures = [
            client.submit(_dask_task, s, plan.assignment, plan.seed, plan.unsafe_no_sandbox, pure=False) for s in todo
        ]
        for future in dask_completed(futures):
            yield future.result()


def _dask_task(submission: Submission, assignment: Assignment, seed: int, unsafe_no_sandbox: bool) -> Grade:
    """On a Dask worker: warm once per worker process, then grade like a local worker."""
    dynamic = worker.warm_up()
    return grade_one(submission, assignment, seed, None, dynamic, unsafe_no_sandbox)
