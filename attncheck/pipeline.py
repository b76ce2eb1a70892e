"""One run, start to finish: files -> static lint -> dynamic checks -> merge.

The static pass streams: files are read and linted one at a time (in worker
processes when there are many), so memory holds results, not a queue of
texts, and the rules are imported once per process, not once per file. With a
cache (``attncheck.cache``) the files are read here first and only those whose
content has no entry are linted; the parser, the rules and the worker pool
are loaded only when there is such a file. The dynamic stage is imported only
when it will run, so a static-only run never imports torch.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cache as memoized
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, NamedTuple

from attncheck import collector
from attncheck.cache import Cache, default_dir
from attncheck.config import Settings
from attncheck.discovery import Candidate
from attncheck.findings import Finding, Severity, Target, TargetResult
from attncheck.fix_conflicts import withhold
from attncheck.merge import merge
from attncheck.prefilter import could_have_findings
from attncheck.sources import (
    FileError,
    Source,
    from_named_bytes,
    python_syntax_error,
    read_as,
    read_path,
    read_regular,
    syntax_error,
)
from attncheck.static import deadline
from attncheck.static.result import FileResult
from attncheck.suppressions import unknown_codes, unsuppressed

if TYPE_CHECKING:
    from concurrent.futures import Executor, Future

    from attncheck.static.rule import Rule

POOL_THRESHOLD = 64  # fewer files than this are linted in-process: a pool costs more than it saves
STATIC_ONLY_REASON = "static-only run"
INSTALL_HINT = "pip install 'attncheck[dynamic]'"


@dataclass
class Outcome:
    """Everything a reporter needs. ``sources`` keeps the files that have findings, for code frames."""

    findings: list[Finding] = field(default_factory=list)
    targets: list[TargetResult] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)  # every file checked, in order
    sources: dict[str, Source] = field(default_factory=dict)

    @property
    def files(self) -> int:
        return len(self.paths)


@memoized
def _rules(codes: tuple[str, ...]) -> tuple[type[Rule], ...]:
    from attncheck.static.rules import all_rules

    return tuple(rule for rule in all_rules() if rule.code in codes)


def enabled_codes(settings: Settings) -> tuple[str, ...]:
    from attncheck.catalogue import CODES

    return tuple(code for code in CODES if settings.enabled(code))


Item = Candidate | Source | FileError  # a file to read, text already read (stdin), or a failed read


def lint_one(item: Item, codes: tuple[str, ...]) -> FileResult | FileError:
    """Read (unless already read) and lint one file; bad input becomes a FileError."""
    if isinstance(item, (Source, FileError)):
        source: Source | FileError = item
        explicit = True
    else:
        try:
            source = read_path(item.path, item.shown)
        except Exception as error:  # reading never raises by design; a bug costs this file only
            if os.environ.get("ATTNCHECK_DEBUG") == "1":
                raise
            return FileError(item.shown, failure(error))
        explicit = item.explicit
    if isinstance(source, FileError):
        return source
    if not source.text.strip():
        if explicit:
            return FileError(source.path, "empty file: nothing to check", level="note")
        return FileResult(source)
    return _as_result(source, *lint_source(source, codes))


Answer = tuple[list[Finding], list[Target], "str | None"]  # findings, targets, error: what a worker sends back


class Miss(NamedTuple):
    """A file read whose content the cache has no entry for, and the key to store its answer under."""

    source: Source
    key: str


def lint_source(source: Source, codes: tuple[str, ...]) -> Answer:
    """Lint text already read; the answer leaves the text out, so a worker sends back little.

    A text no rule could run on and no target be found in is only compiled, for its syntax errors,
    with Python's own parser (``attncheck.prefilter``: no libcst, no rules). Whatever goes wrong in
    one file is that file's one-line error, and the run goes on: a time limit, nesting deeper than
    Python's stack, a crash of the native parser, and any other exception, which is a bug of
    attncheck's (``ATTNCHECK_DEBUG=1`` raises it instead).
    """
    if not could_have_findings(source.text):
        error = python_syntax_error(source)
        return [], [], error.message if error else None
    from attncheck.static.engine import lint

    limit = deadline.STATIC_TIME_LIMIT_S
    try:
        with deadline.time_limit(limit):
            result = lint(source, _rules(codes))
    except deadline.TimeLimitError:
        return [], [], deadline.gave_up(limit)
    except Exception as error:
        if os.environ.get("ATTNCHECK_DEBUG") == "1":
            raise
        return [], [], failure(error)
    finally:
        collector.after_file()
    return result.findings, result.targets, result.error


# Errors that depend on the machine (memory) or on a bug to be fixed: never remembered.
_NOT_CACHED = ("file too large", "static analysis crashed", "internal error")


def failure(error: Exception) -> str:
    """The one-line error of a file whose analysis raised ``error``."""
    if deadline.after_recursion(error):
        return "file too deeply nested to analyse (deeper than Python's stack allows)"
    if isinstance(error, MemoryError):
        return "file too large to analyse in the memory allowed"
    if isinstance(error, deadline.CrashedError):
        return f"static analysis crashed on this file: {error} (please report it to attncheck)"
    return f"internal error: {type(error).__name__}: {_one_line(error)} (please report it to attncheck)"


def _one_line(error: Exception, width: int = 200) -> str:
    """What ``error`` says, on one line and at most ``width`` characters."""
    try:
        text = " ".join(str(error).split())
    except Exception:  # a message that cannot even be made (a node too deep to print)
        return "(no message)"
    return text if len(text) <= width else text[: width - 1] + "…"


def _as_result(source: Source, findings: list[Finding], targets: list[Target], error: str | None
               ) -> FileResult | FileError:
    if error is None:
        return FileResult(source, findings, targets)
    if error.startswith("syntax error"):
        return syntax_error(source, error)
    return FileError(source.path, error)


def _in_order(function: Callable, items: list, codes: tuple[str, ...], jobs: int) -> Iterator:
    """``function(item, codes)`` for every item, in order: in a process pool when there are
    many and ``jobs`` > 1.

    The pool gets the largest files first, a few at a time, so no worker is left
    with a big file while the others idle; the answers are put back in order.
    """
    if jobs <= 1 or len(items) < POOL_THRESHOLD:
        for item in items:
            yield function(item, codes)
        return
    order = sorted(range(len(items)), key=lambda i: _size(items[i]), reverse=True)
    answers: list = [None] * len(items)
    with _started_pool(codes, jobs) as running:
        done = running.map(function, [items[i] for i in order], [codes] * len(items), chunksize=2)
        for index, answer in zip(order, done, strict=True):
            answers[index] = answer
    yield from answers


def _started_pool(codes: tuple[str, ...], jobs: int) -> Executor:
    """A pool of ``jobs`` lint workers, started now; each imports the linter itself
    (``_start_worker``).

    The import (a quarter of a second, most of it libcst's node classes) is the start of a
    cold run's critical path either way. Imported here, before the workers fork, it runs once,
    on one core, while the others idle; imported by the workers, it runs on each core at once
    while this process reads and hashes the other files (``_pooled_with_cache``), which it
    would otherwise do later, beside the workers. The second way costs one import's CPU more
    (about 1 %) and takes about 2 % less wall time on the bench corpus with two cores (median
    of 20 runs side by side)."""
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=jobs, initializer=_start_worker, initargs=(codes,))
    pool.submit(int)  # the first task is what starts the workers
    return pool


def _import_linter(codes: tuple[str, ...]) -> None:
    """The engine and the rules of ``codes``, imported (and the rules listed) in this process."""
    from attncheck.static import engine  # noqa: F401  (imported for the process's life)

    _rules(codes)


def _start_worker(codes: tuple[str, ...]) -> None:
    """A lint worker's initializer: the linter imported before the first file (``_started_pool``
    says why here), and then the collector paused (``collector.start_worker``), with what the
    worker holds frozen."""
    _import_linter(codes)
    collector.start_worker()


def _size(item: Item) -> int:
    """How much there is to lint in an item, to hand out the big ones first."""
    if isinstance(item, Miss):
        item = item.source
    if isinstance(item, Source):
        return len(item.text)
    if isinstance(item, Candidate):
        try:
            return item.path.stat().st_size
        except OSError:
            return 0
    return 0


def lint_all(items: Iterable[Item], codes: tuple[str, ...], jobs: int,
             cache: Cache | None = None) -> Iterator[FileResult | FileError]:
    """Lint every item, in order. With a cache, answer from it where the content is
    known, lint the rest, and remember their answers."""
    items = list(items)
    if cache is None:
        yield from _in_order(lint_one, items, codes, jobs)
        return
    if jobs > 1 and len(items) >= POOL_THRESHOLD:
        yield from _pooled_with_cache(items, codes, jobs, cache)
        return
    looked_up = [_look_up(item, cache) for item in items]
    misses = [Miss(source, key) for key, source, _ in looked_up if source is not None]
    yield from _answered(items, looked_up, _in_order(partial(_lint_and_store, cache), misses, codes, jobs), codes)


LookedUp = tuple[str, Source | None, FileResult | FileError | None]  # what ``_look_up`` says of an item


def _pooled_with_cache(items: list[Item], codes: tuple[str, ...], jobs: int, cache: Cache
                       ) -> Iterator[FileResult | FileError]:
    """``lint_all`` of many items with a cache, in a pool of workers started at the first miss.

    The items are looked up largest first, and each miss is handed to a worker as soon as it
    is read: the workers lint while this process still reads the other files, and the big
    files are not left for last, when a worker would lint one while the other idles."""
    order = sorted(range(len(items)), key=lambda i: _size(items[i]), reverse=True)
    looked_up: list[LookedUp] = [("", None, None)] * len(items)
    pending: dict[int, Future[Answer]] = {}
    pool: Executor | None = None
    try:
        for index in order:
            key, source, _ = looked_up[index] = _look_up(items[index], cache)
            if source is not None:
                pool = pool or _started_pool(codes, jobs)
                pending[index] = pool.submit(_lint_and_store, cache, Miss(source, key), codes)
        yield from _answered(items, looked_up, (pending[index].result() for index in sorted(pending)), codes)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)


def _answered(items: list[Item], looked_up: list[LookedUp], answers: Iterator[Answer], codes: tuple[str, ...]
              ) -> Iterator[FileResult | FileError]:
    """Each item's result, in order: the cache's, the next of ``answers`` for a miss, or, for an
    item linted as usual (stdin, unreadable, empty), its lint here."""
    for item, (_, source, entry) in zip(items, looked_up, strict=True):
        if source is None:
            yield entry if entry is not None else lint_one(item, codes)
            continue
        yield _as_result(source, *next(answers))


def _lint_and_store(cache: Cache, miss: Miss, codes: tuple[str, ...]) -> Answer:
    """Lint a cache miss and store its answer under its key, in the process that linted it: the
    workers write their entries while the others still lint, not this process once all are done."""
    source, key = miss
    findings, targets, error = answer = lint_source(source, codes)
    if error is None or not (deadline.is_gave_up(error) or error.startswith(_NOT_CACHED)):
        cache.put(key, findings, targets, error)
    return answer


def _look_up(item: Item, cache: Cache) -> LookedUp:
    """(key, source to lint, None) for a miss; ("", None, result) for a hit;
    ("", None, None) for an item linted as usual (stdin, unreadable, empty)."""
    if not isinstance(item, Candidate):
        return "", None, None
    data = read_regular(item.path, item.shown)
    if isinstance(data, FileError):
        return "", None, None
    source = from_named_bytes(data, item.shown, item.path.name)
    if isinstance(source, FileError) or not source.text or source.text.isspace():  # isspace: no copy
        return "", None, None
    key = Cache.key(data, read_as(item.path.name))
    entry = cache.get(key, source)
    if entry is None:
        return key, source, None
    return "", None, _as_result(source, entry.findings, entry.targets, entry.error)


def open_cache(codes: tuple[str, ...]) -> Cache:
    """The cache of this attncheck and rule selection, in its default place."""
    return Cache(default_dir(), codes)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def run(
    items: Iterable[Item],
    settings: Settings,
    *,
    static_only: bool,
    jobs: int,
    warn: Callable[[str], None] = _stderr,
    use_cache: bool = False,
    progress: Callable[[str], None] = lambda message: None,
    only: str | None = None,
) -> tuple[Outcome, list[FileResult]]:
    """The whole pass. Returns the outcome and the static results (for fixes). ``progress`` hears
    what the run is doing (``attncheck.progress`` shows it on a terminal); ``only`` keeps the
    targets of that name and the findings in them (``attncheck.assert_attention``)."""
    items = list(items)
    launch = None if static_only else _prestart(items, settings, jobs)
    try:
        return _run(items, settings, static_only, jobs, warn, use_cache, progress, only)
    finally:
        if launch is not None:
            launch.cancel_waiting()


def _prestart(items: list[Item], settings: Settings, jobs: int) -> ModuleType | None:
    """Start the dynamic children of a run over at most ``jobs`` Python files before linting them,
    so that their start-up (Python, ``import torch``) overlaps the static pass. Returns the launch
    module, whose waiting children ``run`` ends at the end; None when nothing started (no torch,
    or a stand-in launch module without ``prestart``)."""
    paths = [item.path for item in items if isinstance(item, Candidate) and item.path.suffix == ".py"]
    if not paths or len(paths) > max(1, jobs):
        return None
    try:
        from attncheck.dynamic import launch
    except ImportError:
        return None
    if not hasattr(launch, "prestart"):
        return None
    launch.prestart(paths, settings.dynamic_options(jobs))
    return launch


def _run(items: list[Item], settings: Settings, static_only: bool, jobs: int, warn: Callable[[str], None],
         use_cache: bool, progress: Callable[[str], None], only: str | None = None
         ) -> tuple[Outcome, list[FileResult]]:
    codes = enabled_codes(settings)
    outcome = Outcome()
    results: list[FileResult] = []
    cache = open_cache(codes) if use_cache else None
    for done, result in enumerate(lint_all(items, codes, jobs, cache), start=1):
        outcome.paths.append(result.path if isinstance(result, FileError) else result.source.path)
        progress(f"linted {done}/{len(items)} files: {outcome.paths[-1]}")
        if isinstance(result, FileError):
            outcome.errors.append(result)
            continue
        result.findings = _kept(result.findings, result.source.path, settings)
        if only is not None:
            result.targets = [t for t in result.targets if t.name == only]
            result.findings = [f for f in result.findings if f.target == only]
        results.append(result)
        for line, code in unknown_codes(result.source.text):
            warn(f"{result.source.path}:{line}: warning: unknown code {code!r} in a suppression comment "
                 "(it hides nothing; see `attncheck rules`)")
    dynamic: list[Finding] = []
    if static_only:
        outcome.targets = _skipped(results, STATIC_ONLY_REASON)
    elif results:
        targets = sum(len(r.targets) for r in results)
        progress(f"dynamic checks of {targets} targets (each up to {settings.timeout:g} s)")
        dynamic, outcome.targets = _run_dynamic(results, settings, jobs, warn)
        dynamic = _kept(dynamic, None, settings)
        dynamic = _unsuppressed_dynamic(dynamic, results)
    static = [f for result in results for f in result.findings]
    outcome.findings = withhold(sorted(merge(static, dynamic, outcome.targets, settings.isolated), key=_order))
    paths = {f.path for f in outcome.findings}
    outcome.sources = {r.source.path: r.source for r in results if r.source.path in paths}
    return outcome, results


def _kept(findings: Sequence[Finding], path: str | None, settings: Settings) -> list[Finding]:
    """Drop the findings that select/ignore or per-file-ignores turn off."""
    kept = []
    for finding in findings:
        off = settings.ignored_for(path or finding.path) if settings.per_file_ignores else ()
        if settings.enabled(finding.code) and not any(finding.code.startswith(code) for code in off):
            kept.append(finding)
    return kept


def _unsuppressed_dynamic(dynamic: Sequence[Finding], results: Sequence[FileResult]) -> list[Finding]:
    """The dynamic findings that no suppression comment on their line hides, as for static ones."""
    sources = {r.source.path: r.source for r in results}
    by_path: dict[str, list[Finding]] = {}
    for finding in dynamic:
        by_path.setdefault(finding.path, []).append(finding)
    return [
        kept
        for path, found in by_path.items()
        for kept in (unsuppressed(found, sources[path]) if path in sources else found)
    ]


def _skipped(results: Sequence[FileResult], reason: str) -> list[TargetResult]:
    return [TargetResult(target, "skipped", reason) for r in results for target in r.targets]


def _run_dynamic(
    results: list[FileResult], settings: Settings, jobs: int, warn: Callable[[str], None]
) -> tuple[list[Finding], list[TargetResult]]:
    try:
        from attncheck.dynamic.launch import run_dynamic
    except ImportError as error:
        reason = f"dynamic checks skipped: {error} ({INSTALL_HINT})"
        warn(reason)
        return [], _skipped(results, reason)
    try:
        found, targets = run_dynamic(results, settings.dynamic_options(jobs))
    except Exception as error:  # the static results must survive a crash of the dynamic stage
        if os.environ.get("ATTNCHECK_DEBUG") == "1":
            raise
        reason = f"dynamic stage failed: {type(error).__name__}: {error} (please report this)"
        warn(reason)
        return [], [replace(t, status="error", reason=reason) for t in _skipped(results, reason)]
    if settings.device == "cuda" and any(t.device == "cpu" for t in targets):
        warn("--device cuda: no CUDA GPU is visible to torch, so the dynamic checks ran on the CPU")
    return list(found), list(targets)


def combine(parts: Sequence[tuple[Outcome, list[FileResult]]]) -> tuple[Outcome, list[FileResult]]:
    """One outcome of runs over files checked under different settings (``attncheck.projects``)."""
    if len(parts) == 1:
        return parts[0]
    outcome, results = Outcome(), []
    for part, part_results in parts:
        outcome.findings += part.findings
        outcome.targets += part.targets
        outcome.errors += part.errors
        outcome.paths += part.paths
        outcome.sources.update(part.sources)
        results += part_results
    outcome.findings.sort(key=_order)
    return outcome, results


def _order(finding: Finding) -> tuple:
    span = finding.span
    return (finding.path, span.cell or 0, span.line, span.column, finding.code)


def has_problems(outcome: Outcome) -> bool:
    """Whether the run should fail: a finding at warning or above, a file that could not be checked,
    or a target whose dynamic check ended in an error (a hang, a crash, an import failure)."""
    return (
        any(f.severity >= Severity.WARNING for f in outcome.findings)
        or any(e.level == "error" for e in outcome.errors)
        or any(t.status == "error" for t in outcome.targets)
    )
