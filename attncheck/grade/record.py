"""One student's grade: plain data that the gradebook stores, a Dask worker sends back, and
every output (CSV, feedback, Gradescope, HTML) reads.

``grade_one`` is the whole of one submission's grading (stage, check, score) and never raises:
whatever goes wrong becomes that row's status, so one submission never costs the run.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attncheck.catalogue import CODES
from attncheck.dynamic.probes.sizes import drawn
from attncheck.grade import rubric, submissions
from attncheck.grade.assignment import Assignment

GRADED = "graded"
UNREADABLE = "could not be read"
NOT_RUN = "could not be run"
INTERNAL = "grader error"


@dataclass
class Mistake:
    """A finding, as a learner reads it: where, what, and the catalogue's name for it."""

    code: str
    name: str
    severity: str
    message: str
    where: str
    line: int
    source: str
    costs: float
    advice: bool = False  # the rubric grades this code as advice: reported, never charged

    @property
    def counts(self) -> bool:
        """A mistake that costs points (or fails a check), not advice a correct module may keep."""
        return self.severity != "info" and not self.advice and (self.source == "dynamic" or self.costs > 0)


@dataclass
class Grade:
    """A row of the gradebook."""

    student: str
    digest: str
    status: str
    score: float = 0.0
    maximum: float = 0.0
    groups: list[dict[str, Any]] = field(default_factory=list)  # rubric.GroupScore as dicts
    mistakes: list[Mistake] = field(default_factory=list)
    problem: str = ""
    target: str = ""
    file: str = ""
    weights: dict[str, list[list[float]]] = field(default_factory=dict)
    isolation: str = ""
    seconds: float = 0.0
    seed: int = 0
    sizes: dict[str, int] = field(default_factory=dict)  # the batch and sequence lengths drawn from ``seed``

    def codes(self) -> str:
        """The codes of the mistakes that count, once each, in order: the gradebook's column."""
        return " ".join(dict.fromkeys(m.code for m in self.mistakes if m.counts))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Grade:
        mistakes = [Mistake(**m) for m in data.get("mistakes", [])]
        return cls(**{**data, "mistakes": mistakes})


def grade_one(submission: submissions.Submission, assignment: Assignment, seed: int,
              staging_root: Path | None = None, dynamic: bool = True, unsafe_no_sandbox: bool = False) -> Grade:
    """Stage, check and score one submission; every failure becomes the row's status."""
    from attncheck.grade import worker

    sizes = drawn(seed)
    base = Grade(submission.student, submission.digest, UNREADABLE, maximum=assignment.rubric.maximum, seed=seed,
                 sizes=sizes.to_dict())
    own_root = Path(tempfile.mkdtemp(dir=staging_root))  # a neutral name: the child sees its path
    try:
        staged = submissions.stage(submission, own_root)
        checked = worker.check(staged, assignment, seed, sizes, dynamic, unsafe_no_sandbox)
        return score(base, checked, assignment, staged)
    except submissions.UnreadableError as error:
        base.problem = f"could not be read: {error}"
        base.groups = _zero_groups(assignment)
        return base
    except Exception as error:  # a defect of the grader: this row says so, the run goes on
        base.status, base.problem = INTERNAL, f"internal error: {type(error).__name__}: {error} (please report this)"
        base.groups = _zero_groups(assignment)
        return base
    finally:
        shutil.rmtree(own_root, ignore_errors=True)


def score(base: Grade, checked: Any, assignment: Assignment, staged: submissions.Staged) -> Grade:
    """The rubric applied to what the checker said."""
    chosen = checked.target
    base.isolation, base.seconds = checked.isolation, round(checked.seconds, 3)
    if chosen is None:
        base.problem = checked.problem or "nothing to grade"
        base.status = UNREADABLE if base.problem.startswith("could not be read") else NOT_RUN
        base.groups = _zero_groups(assignment)
        return base
    base.target, base.file = chosen.target.name, chosen.target.path
    findings = [f for f in checked.outcome.findings if _about(f, chosen.target.name)]
    groups = [*rubric.score_groups(assignment.rubric, chosen), rubric.score_static(assignment.rubric, findings)]
    base.groups = [asdict(g) for g in groups]
    base.score = round(sum(g.score for g in groups), 2)
    cells = staged.cells.get(Path(chosen.target.path).name, ())
    base.mistakes = [_mistake(f, cells, assignment.rubric) for f in findings]
    base.weights = checked.weights.get(chosen.target.name, {})
    base.status = NOT_RUN if chosen.status in ("error", "skipped") else GRADED
    base.problem = chosen.reason if base.status == NOT_RUN else ""
    return base


def _about(finding: Any, target: str) -> bool:
    """The graded target's findings, and what the code review found anywhere in the submission (a
    helper function's wrong scale is the student's mistake too); not another target's dynamic ones."""
    return finding.target in (None, target) or finding.source in ("static", "both")


def _mistake(finding: Any, cells: tuple[tuple[int, int], ...], grading: rubric.Rubric) -> Mistake:
    info = CODES.get(finding.code)
    line = finding.span.line
    return Mistake(finding.code, info.name if info else finding.code, str(finding.severity), finding.message,
                   submissions.where(cells, line), line, finding.source,
                   grading.cost(finding.code) if finding.source in ("static", "both") else 0.0,
                   grading.is_advice(finding.code))


def _zero_groups(assignment: Assignment) -> list[dict[str, Any]]:
    graded = assignment.rubric
    return [asdict(rubric.GroupScore(name, 0.0, points, "not run")) for name, points in graded.points.items()] + [
        asdict(rubric.GroupScore(rubric.STATIC, 0.0, graded.static_points, "not run"))
    ]
