"""``attncheck grade SUBMISSIONS``: the command line of the grader (registered by ``attncheck.cli``).

Imports nothing heavy at load: ``attncheck --help`` and the static path never import torch.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

DEFAULT_OUT = "attncheck-grade"


@click.command()
@click.argument("submissions", type=click.Path(exists=True, path_type=Path))
@click.option("--assignment", "assignment_file", type=click.Path(dir_okay=False, path_type=Path),
              help="The assignment TOML: target, variant, how to call it, rubric [default: the default rubric].")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_OUT, show_default=True,
              help="Where the gradebook, feedback, Gradescope results and report.html go.")
@click.option("--rerun", is_flag=True, help="Grade every submission again, even those already in the gradebook.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=2, show_default=True,
              help="Worker processes (each imports torch once).")
@click.option("--seed", type=click.IntRange(min=0), help="Reproduce a run's inputs [default: drawn afresh].")
@click.option("--dask-scheduler", metavar="ADDRESS",
              help="Grade on an existing Dask distributed cluster (pip install 'attncheck[grade-dask]').")
@click.option("--unsafe-no-sandbox", is_flag=True,
              help="Run submissions even where the kernel refuses the grading jail's namespaces: only "
                   "rlimits and seccomp then protect this machine and the other submissions.")
def grade(submissions: Path, assignment_file: Path | None, out: Path, rerun: bool, jobs: int, seed: int | None,
          dask_scheduler: str | None, unsafe_no_sandbox: bool) -> None:
    """Grade a folder of submissions (one .py, notebook, folder or .zip per student), or one file."""
    from attncheck.grade import assignment, outputs, schedule
    from attncheck.grade.submissions import find

    try:
        task = assignment.load(assignment_file)
    except assignment.AssignmentError as error:
        raise click.ClickException(str(error)) from error
    out = out.resolve()
    root = submissions.resolve()
    found = find(root, skip=(out,))
    if not found:
        raise click.ClickException(f"no submissions in {submissions}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / ".attncheck-write-test").touch()
        (out / ".attncheck-write-test").unlink()
    except OSError as error:
        raise click.ClickException(f"--out: cannot write {out}: {error.strerror or error}") from error
    plan = schedule.Plan(found, task, out, schedule.draw_seed() if seed is None else seed, jobs, rerun,
                         dask_scheduler, unsafe_no_sandbox)
    started = time.monotonic()
    with _ProgressBar(len(found)) as advance:
        grades = schedule.run(plan, advance)
    outputs.write_all(out, grades, task, plan.seed)
    _print_table(grades, time.monotonic() - started, out)


class _ProgressBar:
    """A rich progress bar (count, time left) on a terminal; nothing elsewhere."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.bar = None

    def __enter__(self):
        if sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("grading"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                transient=True)
            self.bar.start()
            self.task = self.bar.add_task("grading", total=self.total)
        return self.advance

    def advance(self, _grade) -> None:
        if self.bar is not None:
            self.bar.advance(self.task)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


def _print_table(grades, seconds: float, out: Path) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from attncheck.untrusted_text import shown

    table = Table(box=None, pad_edge=False)
    for column in ("student", "score", "status", "mistakes"):
        table.add_column(column)
    for grade in grades:  # as Text: a "[green]" in a student's name or file name is no markup
        table.add_row(Text(grade.student), f"{grade.score:g}/{grade.maximum:g}", grade.status,
                      Text(grade.codes() or shown(grade.problem[:80] if grade.problem else "")))
    console = Console(highlight=False, soft_wrap=True)
    console.print(table)
    console.print(f"{len(grades)} submissions in {seconds:.1f} s; gradebook, feedback, Gradescope results and "
                  f"report.html in {out}")
