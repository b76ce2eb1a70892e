"""Check one staged submission with attncheck's own passes, in a warm process.

The static pass is ``pipeline.lint_all``; the dynamic pass is ``runner.run_dynamic`` with a
child forked from this worker's zygote (``attncheck.dynamic.harness.forked``) instead of a new
interpreter, so torch is imported once per worker, not once per submission. What comes back is an ``Outcome`` (the
report every attncheck format reads), the target the grade is about, and the attention
weights the HTML report draws.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attncheck import pipeline
from attncheck.config import DynamicOptions, Settings
from attncheck.discovery import Candidate
from attncheck.dynamic.probes.sizes import Sizes
from attncheck.findings import Finding, TargetResult
from attncheck.grade import submissions
from attncheck.grade.assignment import AUTO, Assignment
from attncheck.merge import merge
from attncheck.sources import FileError
from attncheck.static.result import FileResult

Weights = list[list[float]]
# what the dynamic pass gives: findings, targets, isolation, attention weights
Dynamic = tuple[list[Finding], list[TargetResult], str, dict[str, dict[str, Weights]]]
NO_TORCH = f"not run: the dynamic checks need torch ({pipeline.INSTALL_HINT})"
MAX_SHOWN_SIDE = 64  # queries or keys of the attention weights a report draws (the inputs have fewer)
MAX_TIMEOUTS = 4  # a submission's children share this many of the assignment's timeouts in all


@dataclass
class Checked:
    """What the checker said about one submission."""

    outcome: pipeline.Outcome
    target: TargetResult | None = None
    problem: str | None = None  # why nothing could be graded ("could not be read: ...")
    weights: dict[str, dict[str, Weights]] = field(default_factory=dict)  # target -> "student", "reference"
    isolation: str = ""
    seconds: float = 0.0


def warm_up() -> bool:
    """Import torch and the runner now, and start the zygote, once per worker; False without torch."""
    try:
        from attncheck.dynamic.harness.zygote_client import start_zygote

        start_zygote()  # a fresh process: it imports torch while this one does
        for name in ("attncheck.dynamic.runner", "attncheck.dynamic.inside.weights_capture"):
            importlib.import_module(name)
    except ImportError:
        return False
    return True


def check(staged: submissions.Staged, assignment: Assignment, seed: int, sizes: Sizes, dynamic: bool = True,
          unsafe_no_sandbox: bool = False) -> Checked:
    """Lint, run and judge one submission, its inputs drawn with ``seed`` at ``sizes``; nothing it does can
    raise past here."""
    started = time.perf_counter()
    # Always isolated: no configuration beside a submission is read (a student's ``ignore``), and
    # a dynamic pass never silences a static error (code that behaves only when it is watched).
    settings = Settings(root=staged.folder, timeout=assignment.timeout, device="cpu", isolated=True)
    codes = pipeline.enabled_codes(settings)
    candidates = [Candidate(path, path.relative_to(staged.folder).as_posix(), True) for path in staged.files]
    outcome = pipeline.Outcome()
    results: list[FileResult] = []
    for result in pipeline.lint_all(candidates, codes, jobs=1):
        if isinstance(result, FileError):
            outcome.errors.append(result)
        else:
            results.append(result)
    checked = Checked(outcome)
    static = [f for r in results for f in r.findings]
    found: list[Finding] = []
    if dynamic and any(r.targets for r in results):
        found, outcome.targets, checked.isolation, checked.weights = _run_dynamic(results, assignment, seed, sizes,
                                                                                staged.folder, unsafe_no_sandbox)
    else:
        outcome.targets = [TargetResult(t, "skipped", NO_TORCH) for r in results for t in r.targets]
    outcome.findings = merge(static, found, outcome.targets, keep_static_errors=settings.isolated)
    outcome.sources = {r.source.path: r.source for r in results}
    outcome.paths = [c.shown for c in candidates]
    checked.target = choose(outcome.targets, assignment)
    checked.problem = _problem(outcome, checked.target, assignment)
    checked.seconds = time.perf_counter() - started
    return checked


def _run_dynamic(results: list[FileResult], assignment: Assignment, seed: int, sizes: Sizes, own: Path,
                 unsafe_no_sandbox: bool) -> Dynamic:
    from attncheck.dynamic import runner

    declaration = assignment.declaration()
    names = [t.name for r in results for t in r.targets]
    wanted = names if assignment.target == AUTO else [assignment.target]
    options = DynamicOptions(timeout=assignment.timeout, device="cpu", jobs=1, unsafe_no_sandbox=unsafe_no_sandbox,
                             targets={name: declaration for name in wanted} if declaration else {})
    child = _GradingChild(own, options)
    found, targets = runner.run_dynamic(results, options, child, seed, sizes)
    return list(found), list(targets), child.isolation, child.weights


class _GradingChild:
    """The runner's child: a jailed fork of this process per call, running the capturing entry;
    keeps how it was jailed and the attention weights each target showed.

    All its calls share one time budget, ``MAX_TIMEOUTS`` times the assignment's timeout: the
    runner runs a file's targets again one by one after its child timed out, so twelve classes
    whose forward hangs held the worker for 320 s at a 4 s timeout (twelve children, each to its
    limit). Once the budget is spent, a call is answered at once, as timed out."""

    def __init__(self, own: Path, options: DynamicOptions) -> None:
        self.own, self.options = own, options
        self.isolation = ""
        self.weights: dict[str, dict[str, Weights]] = {}
        self.budget_s = options.timeout * MAX_TIMEOUTS

    def __call__(self, path: Path, request: dict, tensors: dict) -> Any:
        from dataclasses import replace

        from attncheck.dynamic.harness.forked import run_forked
        from attncheck.dynamic.harness.prestarted import limits_for
        from attncheck.dynamic.harness.sandbox import ChildOutcome
        from attncheck.dynamic.inside import weights_capture as capture

        if self.budget_s <= 0:
            spent = f"not run: the submission used its {self.options.timeout * MAX_TIMEOUTS:g} s"
            return ChildOutcome("timeout", spent, [], "", "", self.isolation)
        module = path if path.is_absolute() else self.own / path  # sources are named relative to the submission
        limits = limits_for(self.options, len(request.get("targets", [])))
        limits = replace(limits, timeout_s=min(limits.timeout_s, self.budget_s))
        started = time.monotonic()
        outcome = run_forked(module, {**request, "entry": capture.ENTRY}, tensors, limits, [self.own],
                             self.options.unsafe_no_sandbox)
        self.budget_s -= time.monotonic() - started
        self.isolation = outcome.isolation
        self.weights.update(_weights(outcome.replies, request, tensors))
        return outcome


def _weights(replies: list[Any], request: dict, tensors: dict) -> dict[str, dict[str, Weights]]:
    """Per target: the student's first attention weights and, where the layout allows, the reference's.

    Only a (query, key) square the report can draw: the child chooses what it sends, and one
    softmax over 5000 x 5000 became 25 million floats in the grader's memory, the gradebook and
    report.html (gigabytes, for every student's report)."""
    from attncheck.dynamic.inside import weights_capture as capture
    from attncheck.grade.reference_view import reference_weights

    units = {str(u["id"]): u for u in request.get("targets", [])}
    shown: dict[str, dict[str, Weights]] = {}
    for reply in replies:
        unit = units.get(str(reply.facts.get("unit")))
        weights = reply.tensors.get(capture.WEIGHTS)
        if unit is None or weights is None or weights.ndim != 2 or max(weights.shape) > MAX_SHOWN_SIDE:
            continue
        heads = int(reply.tensors[capture.HEADS][0]) if capture.HEADS in reply.tensors else 1
        shown[unit["name"]] = {"student": weights.tolist()}
        reference = reference_weights(unit, reply.facts, reply.tensors, tensors, heads)
        if reference is not None:
            shown[unit["name"]]["reference"] = reference
    return shown


def choose(targets: list[TargetResult], assignment: Assignment) -> TargetResult | None:
    """The target the grade is about: the one the assignment names, else the attention target
    attncheck ran furthest (a class before a helper function, then the most checks run)."""
    if assignment.target != AUTO:
        return next((t for t in targets if t.target.name == assignment.target), None)
    if not targets:
        return None

    def rank(result: TargetResult) -> tuple:
        ran = sum(c.status in ("passed", "failed") for c in result.checks)
        return (result.status in ("passed", "failed"), result.target.is_class, ran)

    return max(targets, key=rank)


def _problem(outcome: pipeline.Outcome, target: TargetResult | None, assignment: Assignment) -> str | None:
    if target is not None:
        return None
    errors = [e for e in outcome.errors if e.level == "error"]
    if errors:
        where = f", line {errors[0].span.line}" if errors[0].span is not None else ""
        return f"could not be read: {errors[0].path}{where}: {errors[0].message}"
    if assignment.target != AUTO:
        return f"no class or function named {assignment.target} was found"
    return "no attention class or function was found"
