"""``run_dynamic``: bind, plan, run one child per file, judge, and turn failures into findings.

One child per file, because starting a process and importing torch costs more
than every experiment of a typical module together. A child that times out
or crashes loses only the target it was running: the runner starts a fresh
child for the targets not yet answered.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from attncheck.catalogue import CODES
from attncheck.dynamic import codes
from attncheck.dynamic.binding.bind import Binding, bind
from attncheck.dynamic.diagnosis import crashes as crashes_module
from attncheck.dynamic.diagnosis import fault
from attncheck.dynamic.harness import protocol, reply_plan, sent_weights
from attncheck.dynamic.loading import failures
from attncheck.dynamic.loading import request as loading_request
from attncheck.dynamic.probes import evidence, precision
from attncheck.dynamic.probes import rope_functions as rope_targets
from attncheck.dynamic.probes.base import Plan
from attncheck.dynamic.probes.judge import Judge, plan
from attncheck.dynamic.probes.sizes import DEFAULT, Sizes
from attncheck.dynamic.reference import variant_fit
from attncheck.findings import Check, Finding, Severity, Target, TargetResult
from attncheck.static.result import FileResult
from attncheck.static.rules.att4_gqa_rope.gqa_grouping import PRETRAINED_LOADERS

SEED = 0


class DynamicOptions(Protocol):
    """What the runner reads from the CLI's options (``attncheck.config.DynamicOptions``)."""

    timeout: float
    device: str
    jobs: int
    targets: Mapping[str, Mapping[str, Any]]
    unsafe_no_sandbox: bool


class Outcome(Protocol):
    """The sandbox's ``ChildOutcome``: status, reason and one reply per finished unit."""

    status: str
    reason: str
    replies: list[Any]  # each with .facts (dict) and .tensors (dict[str, numpy.ndarray])


Child = Callable[[Path, dict, dict[str, np.ndarray]], Outcome]


def sandbox_child(options: DynamicOptions) -> Child:
    """The real isolated child process, with the time limit from the options.

    A child already started for the file (``prestarted``) is used
    when there is one: its Python and ``import torch`` are then (partly) done.
    """
    from attncheck.dynamic.harness.prestarted import limits_for, take
    from attncheck.dynamic.harness.sandbox import RLIMITS_ONLY, ChildOutcome, refusal, run_child

    def child(path: Path, request: dict, tensors: dict[str, np.ndarray]) -> Outcome:
        refused = refusal(options.unsafe_no_sandbox)
        if refused is not None:
            return ChildOutcome("error", refused, [], "", "", RLIMITS_ONLY)
        limits = limits_for(options, len(request.get("targets", [])))
        started = take(path, limits)
        if started is not None:
            return started.run(request, tensors, limits)
        return run_child(path, request, tensors, limits)

    return child


def run_dynamic(
    results: Sequence[FileResult],
    options: DynamicOptions,
    child: Child | None = None,
    seed: int = SEED,
    sizes: Sizes = DEFAULT,
) -> tuple[list[Finding], list[TargetResult]]:
    """Check every target of every file; findings and per-target results, in file order.

    ``seed`` draws the inputs, masks and weights, ``sizes`` are their batch and sequence lengths
    (``attncheck grade`` draws both afresh per run)."""
    runnable = [result for result in results if result.targets and result.error is None]
    if child is None:
        try:
            child = sandbox_child(options)
        except ImportError as exc:
            return [], [
                TargetResult(t, "error", f"the sandbox is not available: {exc}") for r in runnable for t in r.targets
            ]
    # Bind and plan (which parse each file's text) here, in one thread: CPython 3.11's ast.parse keeps its
    # recursion depth in interpreter-wide state, and two threads parsing at once fail with "SystemError: AST
    # constructor recursion depth mismatch" (gh-106905). Only the children and the judging run in the pool.
    prepared = [prepare(result, options, seed, sizes) for result in runnable]
    with _one_intra_op_thread(), ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        per_file = list(pool.map(lambda p: _file_confined(p, options, child), prepared))
    findings = [f for file_findings, _ in per_file for f in file_findings]
    target_results = [t for _, file_results in per_file for t in file_results]
    return findings, target_results


@contextmanager
def _one_intra_op_thread() -> Iterator[None]:
    """Judge with one intra-op thread: the tensors are tiny, and on a busy machine torch's
    thread pool makes each small matmul wait for a second thread (measured: the judging of a
    typical module took 0.9-1.8 s of CPU with two threads, 0.02 s with one)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _file_confined(
    prepared: Prepared, options: DynamicOptions, child: Child
) -> tuple[list[Finding], list[TargetResult]]:
    """``checked``, whose every failure ends this file's targets in an error: one hostile file
    never ends the run of the others (a forged reply that slipped past every check included)."""
    try:
        return checked(prepared, options, child)
    except Exception as error:
        reason = _own_failure("check this file", error)
        return [], [TargetResult(target, "error", reason) for target in prepared.result.targets]


def check_file(
    result: FileResult, options: DynamicOptions, child: Child, seed: int = SEED, sizes: Sizes = DEFAULT
) -> tuple[list[Finding], list[TargetResult]]:
    """All targets of one file, on the device the options ask for; see ``_gpu_only_crashes``."""
    return checked(prepare(result, options, seed, sizes), options, child)


def checked(prepared: Prepared, options: DynamicOptions, child: Child) -> tuple[list[Finding], list[TargetResult]]:
    """A prepared file's targets run and judged on the device the options ask for, then on the CPU
    for those that crashed on the GPU alone."""
    found, results = run_prepared(prepared, options, child)
    if any(r.device == "cuda" for r in results):
        found, results = _gpu_only_crashes(prepared, options, child, found, results)
    return _self_attention_functions(prepared, options, child, found, results)


def _self_attention_functions(
    prepared: Prepared,
    options: DynamicOptions,
    child: Child,
    found: list[Finding],
    results: list[TargetResult],
) -> tuple[list[Finding], list[TargetResult]]:
    """Bare functions that query and key lengths that differ broke (``fault.SELF_ATTENTION_ONLY``: a
    ``(t, t)`` mask built from one of them), planned again on inputs of one length and run: a
    self-attention function is checked as what it is, and its ``inputs`` check says it took only that.
    Where that run fails to forward too, the first skip stands."""
    plans = dict(prepared.pending)
    again = []
    for index, result in enumerate(results):
        if result.status == "skipped" and fault.SELF_ATTENTION_ONLY in result.reason and index in plans:
            sizes = plans[index].sizes
            one_length = replace(sizes, seq_q=sizes.seq_self, seq_k=sizes.seq_self)
            again.append((index, plan(plans[index].binding, index, prepared.seed, one_length)))

    def adopted(index: int, result: TargetResult, own: list[Finding]) -> Check | None:
        if result.status == "error" or (result.status == "skipped" and not result.checks):
            return None  # it does not forward on one length either, or cannot be judged there: the skip stands
        why = f"self-attention only: {fault.SELF_ATTENTION_ONLY}, so it is checked on query and key of one length"
        return Check("inputs", "skipped", why)

    return _run_again(prepared, options, child, found, results, again, adopted)


def _gpu_only_crashes(
    prepared: Prepared,
    options: DynamicOptions,
    child: Child,
    found: list[Finding],
    results: list[TargetResult],
) -> tuple[list[Finding], list[TargetResult]]:
    """Targets that crashed on the GPU, run again on the CPU: a crash the CPU run does not share is
    about the device, not the attention (a tensor made without ``device=``, a device-side assert),
    so the CPU run's verdict stands, with a ``device`` check saying what failed on cuda. The CPU run
    reuses the file's plans (``results[i]`` is target ``i``): nothing is read or planned again."""
    crashed = {
        i for i, r in enumerate(results)
        if r.device == "cuda" and _crashed(r, [f for f in found if f.target == r.target.name])
    }

    def adopted(index: int, result: TargetResult, own: list[Finding]) -> Check | None:
        if _crashed(result, own):
            return None  # it crashes on the CPU too: the GPU run's verdict stands
        first = results[index]
        crash = next((f.message for f in found if f.target == first.target.name and f.code == codes.FORWARD_CRASH),
                     first.reason)
        return Check("device", "failed", f"on cuda: {crash}; the verdict is the CPU run's")

    again = [(i, p) for i, p in prepared.pending if i in crashed]
    return _run_again(prepared, replace(options, device="cpu"), child, found, results, again, adopted)


Adopt = Callable[[int, TargetResult, list[Finding]], Check | None]


def _run_again(
    prepared: Prepared,
    options: DynamicOptions,
    child: Child,
    found: list[Finding],
    results: list[TargetResult],
    again: list[tuple[int, Plan]],
    adopted: Adopt,
) -> tuple[list[Finding], list[TargetResult]]:
    """Run the targets of ``again`` once more (their index and new plan) in a fresh child, and take a
    new verdict where ``adopted(index, new result, its findings)`` gives the check
    that says why; the others keep their first verdict (``results[i]`` is target ``i``)."""
    if not again:
        return found, results
    per_target = [[f for f in found if f.target == r.target.name] for r in results]
    new_found, new_results = run_prepared(replace(prepared, outcomes={}, pending=again), options, child)
    for (index, _), new_result in zip(again, new_results, strict=True):
        own = [f for f in new_found if f.target == new_result.target.name]
        check = adopted(index, new_result, own)
        if check is not None:
            new_result.checks.append(check)
            results[index], per_target[index] = new_result, own
    return [f for own in per_target for f in own], results


def _crashed(result: TargetResult, found: list[Finding]) -> bool:
    return result.status == "error" or any(f.code == codes.FORWARD_CRASH for f in found)


@dataclass
class Prepared:
    """One file's targets bound and planned (the skipped ones already settled), and how to load it."""

    result: FileResult
    outcomes: dict[int, TargetResult]
    pending: list[tuple[int, Plan]]
    load: dict[str, Any]
    seed: int


def prepare(result: FileResult, options: DynamicOptions, seed: int = SEED, sizes: Sizes = DEFAULT) -> Prepared:
    """Bind and plan every target of one file: all the reading of its text, no child yet."""
    declarations = getattr(options, "targets", {}) or {}
    outcomes: dict[int, TargetResult] = {}
    pending: list[tuple[int, Plan]] = []
    for index, target in enumerate(result.targets):
        try:
            planned = _planned(target, index, declarations.get(target.name), result.source.text, seed, sizes,
                               compiled=getattr(options, "compile", False))
        except Exception as error:  # attncheck's own failure on this target: the others go on
            outcomes[index] = TargetResult(target, "error", _own_failure("bind this target", error))
            continue
        if isinstance(planned, TargetResult):
            outcomes[index] = planned
        else:
            pending.append((index, planned))
    return Prepared(result, outcomes, pending, loading_request.build(result.source), seed)


def _planned(target: Target, index: int, declaration: Any, text: str, seed: int, sizes: Sizes, *,
             compiled: bool = False) -> Plan | TargetResult:
    """One target's plan, or its skip when it cannot be bound."""
    if rope_targets.applies(target) and declaration is None:
        return rope_targets.plan(target, index)  # type: ignore[return-value]
    binding = bind(target, declaration, text)
    if not binding.ok:
        return TargetResult(target, "skipped", "; ".join(filter(None, [binding.reason, binding.hint])))
    return plan(binding, index, seed, sizes, compiled=compiled)


def _own_failure(doing: str, error: Exception) -> str:
    """The reason given for a target attncheck itself failed on while ``doing`` (an exception of its
    own code, never of the user's): that target's error alone. ``ATTNCHECK_DEBUG=1`` raises it."""
    if os.environ.get("ATTNCHECK_DEBUG") == "1":
        raise error
    return f"attncheck could not {doing}: {type(error).__name__}: {str(error)[:200]} (please report this)"


def run_prepared(
    prepared: Prepared, options: DynamicOptions, child: Child
) -> tuple[list[Finding], list[TargetResult]]:
    """Run a prepared file's targets in as few children as its crashes allow, and judge the replies."""
    result, outcomes, pending, load, seed = (
        prepared.result, dict(prepared.outcomes), list(prepared.pending), prepared.load, prepared.seed
    )
    path = Path(result.source.path)
    findings: dict[int, list[Finding]] = {}
    while pending:
        request = {
            "seed": seed,
            "device": getattr(options, "device", "auto"),
            "targets": [dict(p.unit, id=str(i)) for i, p in pending],
            "load": load,
        }
        tensors = {name: precision.as_sent(array) for _, p in pending for name, array in p.tensors.items()}
        outcome = child(path, request, tensors)
        where = {"device": _device(request["device"]), "isolation": getattr(outcome, "isolation", None)}
        replies = {str(r.facts.get("unit")): r for r in outcome.replies}
        malformed = _malformed_file_reply(replies)
        if malformed:  # the import or load unit: every target of the file waits on it
            outcomes.update({i: TargetResult(p.binding.target, "error", malformed, **where) for i, p in pending})
            break
        if "import" in replies:
            status, reason = failures.import_outcome(replies["import"].facts, load)
            outcomes.update({i: TargetResult(p.binding.target, status, reason, **where) for i, p in pending})
            break
        how = replies["load"].facts.get("how", "") if "load" in replies else ""
        for index, target_plan in pending:
            reply = replies.get(str(index))
            if reply is not None:
                tensors_back = {k: torch.from_numpy(np.asarray(v)) for k, v in reply.tensors.items()}
                outcomes[index], findings[index] = _judged(target_plan, reply.facts, tensors_back, result, seed)
                outcomes[index].isolation = where["isolation"]
                outcomes[index].reason = "; ".join(filter(None, [outcomes[index].reason, how]))
        remaining = [(i, p) for i, p in pending if str(i) not in replies]
        if not remaining:
            break
        culprit_index, culprit = remaining[0]
        reason = outcome.reason or f"the child ended ({outcome.status}) before answering"
        outcomes[culprit_index] = TargetResult(culprit.binding.target, "error", f"{outcome.status}: {reason}", **where)
        pending = remaining[1:]
    ordered = sorted(outcomes)
    return ([f for i in ordered for f in findings.get(i, [])], [outcomes[i] for i in ordered])


def _malformed_file_reply(replies: Mapping[str, Any]) -> str:
    """Why the file's import or load reply breaks ``protocol.ReplyFacts`` ('' when both are sound): the
    runner reads them for every target of the file, so a hostile value must not reach it."""
    for unit in ("import", "load"):
        if unit in replies:
            try:
                protocol.reply_facts(replies[unit].facts)
            except protocol.ReplyError as error:
                return f"the child's reply is malformed: {error}"
    return ""


def _device(wanted: str) -> str:
    """The device a child asked for ``wanted`` uses (the child decides the same way)."""
    if wanted == "cpu":
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def _judged(
    target_plan: Plan, facts: dict[str, Any], tensors: dict[str, torch.Tensor], result: FileResult, seed: int
) -> tuple[TargetResult, list[Finding]]:
    """``judge`` of the facts checked against ``protocol.ReplyFacts``; a malformed reply, one that does not
    fit the plan (``reply_plan``) or whose projections are not the weights ``seed`` sent
    (``sent_weights``), or a fault of attncheck's own judging, ends this target in an error, not the
    whole dynamic stage (every target of every file) as it would by raising."""
    try:
        checked = protocol.reply_facts(facts)
    except protocol.ReplyError as error:
        reason = f"the child's reply is malformed: {error}"
        return TargetResult(target_plan.binding.target, "error", reason), []
    planned = [experiment["name"] for experiment in target_plan.unit.get("experiments", [])]
    refused = reply_plan.unplanned(checked, tensors, planned) or sent_weights.foreign(checked, tensors, seed)
    if refused is not None:
        return TargetResult(target_plan.binding.target, "error", refused, device=facts.get("device")), []
    try:
        return judge(target_plan, checked, tensors, result)
    except Exception as error:
        reason = _own_failure("judge this target", error)
        return TargetResult(target_plan.binding.target, "error", reason, device=facts.get("device")), []


def judge(
    target_plan: Plan, facts: protocol.ReplyFacts, tensors: dict[str, torch.Tensor], result: FileResult
) -> tuple[TargetResult, list[Finding]]:
    """The TargetResult and findings for one answered target."""
    target = target_plan.binding.target
    device = facts.get("device")
    if isinstance(target_plan, rope_targets.RopePlan):
        checks, code, message = rope_targets.judge(target_plan, facts, tensors, result.source.text)
        findings = [_finding(code, message, target, result, [checks[0].detail])] if code else []
        status = "failed" if code else ("passed" if checks[0].status == "passed" else "skipped")
        return TargetResult(target, status, "" if code else checks[0].detail, checks, device), findings
    if not facts.get("binding"):
        return _unbound(target_plan.binding, facts, result, device, target_plan.sizes.lengths(self_style=False))
    target_plan = replace(target_plan, binding=target_plan.binding.chosen(facts["binding"]))
    checks: list[Check] = []
    findings: list[Finding] = []
    # the mistakes the static pass claims; a by-design verdict (a declared unit scale) claims none
    static_codes = {
        f.code for f in result.findings if f.target == target.name and not f.by_design
    }
    if any(f.target == target.name and f.code == "ATT201" and f.by_design for f in result.findings):
        static_codes.add(variant_fit.UNSCALED_BY_DESIGN)
    judging = Judge(target_plan, facts, tensors, static_codes)
    for verdict in judging.verdicts():
        checks.append(verdict.check)
        if verdict.code and not any(f.code == verdict.code for f in findings):
            finding = _finding(verdict.code, verdict.message, target, result, [verdict.check.detail])
            asked = target_plan.binding.declared_variant is not None and target_plan.binding.declared_variant.kv_heads
            findings.append(finding if asked else _consistent_tiling(finding, result, verdict.check.name))
    if any(c.status == "failed" for c in checks):
        seen = evidence.refuted(judging, checks)
        return TargetResult(target, "failed", checks=checks, device=device, refuted=seen), findings
    # The properties held, but the reference could not say whether the output is right: a construct it
    # does not model (reference.unmodelled.reason, the one path of every such skip).
    if judging.unmodelled:
        return TargetResult(target, "skipped", judging.unmodelled, checks=checks, device=device), findings
    seen = evidence.refuted(judging, checks)
    return TargetResult(target, "passed", checks=checks, device=device, refuted=seen), findings


def _unbound(
    binding: Binding, facts: protocol.ReplyFacts, result: FileResult, device: str | None,
    cross_lengths: tuple[int, int],
) -> tuple[TargetResult, list[Finding]]:
    """No candidate forwarded: a crash inside the user's code, or a binding that does not fit
    (``cross_lengths``: the query and key lengths a bare function or cross module was given)."""
    target = binding.target
    attempts = facts.get("attempts", [])
    changed = [a for a in attempts if a["error"].get("type") == sent_weights.PARAMETERS_CHANGED]
    if changed:  # it forwarded, writing into its weights: no binding is at fault, and no verdict can stand
        reason = f"forward raises {changed[0]['error']['type']}: {changed[0]['error']['message']}"
        return TargetResult(target, "error", reason, [Check("forward", "failed", reason)], device), []
    crashes = [a for a in attempts if a["stage"] == "forward" and a["error"].get("line")]
    if crashes:
        error = crashes[0]["error"]
        message = f"forward raises {error['type']}: {error['message']} (line {error['line']})"
        check = Check("forward", "failed", message)
        line_text = _source_line(result, error["line"])
        head_dim = binding.dims.d_model // binding.dims.heads
        named = crashes_module.classify(error["type"], error["message"], line_text, head_dim)
        guess = None if named else fault.harness_guess(binding, error, line_text, cross_lengths)
        if guess is not None:
            reason = f"{message}, on an input the harness guessed ({guess}); {binding.filled_hint}"
            return TargetResult(target, "skipped", reason, [Check("forward", "skipped", reason)], device), []
        crash = (codes.FORWARD_CRASH, message)
        code, text = (named.code, f"{named.message} (line {error['line']})") if named else crash
        evidence = [f"bound with {crashes[0]['label']}", f"raised at line {error['line']}"]
        # at the line that raised, where the user reads it and where a suppression comment applies
        finding = _finding(code, text, target, result, evidence, line=error["line"])
        return TargetResult(target, "failed", message, [check], device), [finding]
    tried = "; ".join(
        f"{a['label']}: {a['stage']} raised {a['error']['type']}: {a['error']['message']}" for a in attempts
    )
    return TargetResult(target, "skipped", f"no binding worked ({tried}); {binding.hint}", device=device), []


def _consistent_tiling(finding: Finding, result: FileResult, check: str) -> Finding:
    """ATT401 seen by running: K/V tiled (query head h on KV head h % Hkv). The catalogue's convention:
    consistent if used everywhere and no pretrained checkpoint is loaded, so a warning (x-transformers
    tiles on purpose: its models are trained that way). It stays an error when the file loads trained
    weights (made with the grouped layout), when its cached path disagrees with its prompt path (the
    ``kv-cache`` check), when the static pass saw the file mix both expansions (an ATT401 error), and (by
    the caller) when a declaration asks for grouped-query attention with its ``kv_heads``."""
    loads = any(word in result.source.text for word in PRETRAINED_LOADERS)
    mixed = check == "kv-cache" or any(
        f.code == "ATT401" and f.severity >= Severity.ERROR for f in result.findings
    )
    if finding.code != "ATT401" or loads or mixed:
        return finding
    why = "; consistent only if used everywhere and no pretrained checkpoint is loaded (this file loads none)"
    return replace(finding, severity=Severity.WARNING, message=finding.message + why)


def _source_line(result: FileResult, line: int | None) -> str:
    """The text of a line of the checked file ('' when unknown)."""
    lines = result.source.text.splitlines()
    return lines[line - 1] if line and 0 < line <= len(lines) else ""


def _finding(code: str, message: str, target: Target, result: FileResult, evidence: list[str],
             line: int | None = None) -> Finding:
    """A dynamic finding, at ``line`` of the checked file when one is known, else at its target."""
    return Finding(
        code,
        CODES[code].severity,
        message,
        result.source.path,
        result.source.locate(line or target.line),
        source="dynamic",
        target=target.name,
        evidence=evidence,
    )
