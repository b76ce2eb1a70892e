"""Lint one Source: parse once, run every selected rule in one batched pass.

The engine owns what all rules share: parsing (and turning a parse failure into
one clear diagnostic), the per-file facts index, the current function and class
during the traversal, the metadata providers the rules declare, suppression
comments, and translating positions into the user's coordinates.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import suppress
from functools import cache as memoized
from functools import partial

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from attncheck.findings import Finding, Target
from attncheck.sources import Source
from attncheck.static import deadline, rule_timing
from attncheck.static.context import FileContext
from attncheck.static.facts import ClassFacts
from attncheck.static.result import FileResult
from attncheck.static.rule import Rule, visitor_methods
from attncheck.static.targets import find_targets
from attncheck.static.tree import fast_tree, walk
from attncheck.static.tree.layout import Layout
from attncheck.static.tree.regions import Reduced, attention_regions
from attncheck.suppressions import unsuppressed


class LazyMetadata(Mapping[type, Mapping[cst.CSTNode, object]]):
    """The metadata the rules declare, resolved on first use.

    Positions take a code generation, and most files produce no finding and
    never ask for one; those that do get them one top-level statement at a
    time (``layout``).
    """

    def __init__(
        self,
        module: cst.Module,
        providers: Iterable[type],
        positions: Callable[[], Mapping[cst.CSTNode, object]] | None = None,
    ) -> None:
        self.module = module
        self.positions = positions
        self.providers = frozenset(providers)
        self._wrapper: MetadataWrapper | None = None
        self._resolved: dict[type, Mapping[cst.CSTNode, object]] = {}

    def __getitem__(self, provider: type) -> Mapping[cst.CSTNode, object]:
        if provider not in self.providers:
            raise KeyError(provider)
        if provider is PositionProvider and self.positions is not None:
            if provider not in self._resolved:
                self._resolved[provider] = self.positions()
            return self._resolved[provider]
        if self._wrapper is None:
            self._wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
        if provider is PositionProvider and provider not in self._resolved:
            # What wrapper.resolve does for it, less the empty batched pass over
            # the whole tree that resolve runs for batchable providers.
            self._resolved[provider] = PositionProvider()._gen(self._wrapper)
        return self._resolved.get(provider) or self._wrapper.resolve(provider)

    def __contains__(self, provider: object) -> bool:
        return provider in self.providers

    def __iter__(self) -> Iterator[type]:
        return iter(self.providers)

    def __len__(self) -> int:
        return len(self.providers)


class _ScopeTracker(cst.BatchableCSTVisitor):
    """Runs first in every batch and keeps FileContext's current scope."""

    def __init__(self, context: FileContext) -> None:
        super().__init__()
        self.context = context

    def get_visitors(self) -> Mapping[str, cst.BatchableCSTVisitor]:
        return visitor_methods(self)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        facts = self.context.facts
        found = next((c for c in facts.classes.values() if c.node is node), None)
        self.context.class_stack.append(found or ClassFacts(node=node, bases=()))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.context.class_stack.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        fn = self.context.facts.function(node)
        if fn is not None:
            self.context.function_stack.append(fn)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        if self.context.facts.function(original_node) is not None:
            self.context.function_stack.pop()


def _parse_exact(source: Source, reduced: Reduced | None) -> tuple[cst.Module, Reduced | None] | str:
    """libcst's module of the attention-relevant lines (``reduced``), when they parse
    on their own, else of the whole file; or a one-line reason it cannot be linted."""
    if reduced is not None:
        try:
            return cst.parse_module(reduced.text), reduced
        except (cst.ParserSyntaxError, RecursionError):
            pass  # the text scan was fooled: parse the whole file below
    try:
        return cst.parse_module(source.text), None
    except cst.ParserSyntaxError as error:
        return _syntax_error(source, error.raw_line, error.raw_column, error.message)
    except (RecursionError, MemoryError):
        return "file too deeply nested to parse"


def _syntax_error(source: Source, line: int, column: int, message: str) -> str:
    span = source.locate(line, column + 1)
    where = f"cell {span.cell}, line {span.line}" if span.cell else f"line {span.line}"
    return f"syntax error at {where}: {message}"


# Limits of Python's own parser, which libcst's parser takes minutes to run into (nesting
# hundreds deep): a file past one is reported with Python's words, at once.
_PYTHON_LIMITS = frozenset({"too many nested parentheses", "too many statically nested blocks"})

# Why the fast tree may give up on a file: what it does not model, a position it did not
# record, and whatever makes ``ast.parse`` fail (libcst's parser then says it plainly).
_NOT_FAST = (fast_tree.NotModelledError, fast_tree.MissingPositionError, SyntaxError, ValueError,
             RecursionError, MemoryError)


def lint(source: Source, rules: Sequence[type[Rule]]) -> FileResult:
    """Run ``rules`` over ``source`` in one batched traversal.

    The tree comes from ``fast_tree``: everything a rule reads of it is what it
    would read of libcst's own tree (checked finding by finding on every fixture
    in ``tests/static/test_tree_fast_tree.py``). Where the fast tree cannot answer (a
    construct it does not model, a position it did not record, the code of a node
    it did not place), it says so, and the file is linted on libcst's tree.
    """
    if not source.text or source.text.isspace():  # not strip(): no copy of the text
        return FileResult(source, error="empty file: nothing to check")
    reduced = attention_regions(source.text)
    try:
        return _lint_fast(source, rules, reduced)
    except _NOT_FAST as error:
        deep = isinstance(error, RecursionError)
        rejected = error if isinstance(error, SyntaxError) and error.lineno is not None else None
    if rejected is not None and rejected.msg in _PYTHON_LIMITS:
        return FileResult(source, error=_rejected(source, reduced, rejected))
    if not deadline.can_isolate():
        return _lint_exact(source, rules, reduced)
    # libcst parses some files Python's parser rejects (a newer Python's syntax), so it is
    # asked first; but where it is slow to answer, Python's own error is the answer.
    budget = deadline.STATIC_TIME_LIMIT_S if rejected is None else min(deadline.STATIC_TIME_LIMIT_S,
                                                                       SYNTAX_ERROR_BUDGET_S)
    try:
        findings, targets, error = deadline.isolated(partial(_isolated_answer, source, rules, reduced, deep), budget)
    except deadline.TimeLimitError:
        if rejected is None:
            raise
        return FileResult(source, error=_rejected(source, reduced, rejected))
    return FileResult(source, findings, targets, error)


# How long libcst may take on a file Python's parser rejected before Python's error is reported.
SYNTAX_ERROR_BUDGET_S = 10.0


def _rejected(source: Source, reduced: Reduced | None, error: SyntaxError) -> str:
    """The one-line error of a file Python's own parser rejects, in its words."""
    line = reduced.original_line(error.lineno or 1) if reduced is not None else error.lineno or 1
    return _syntax_error(source, line, 0, f"{error.msg} (Python's own parser rejects the file)")


def _lint_fast(source: Source, rules: Sequence[type[Rule]], reduced: Reduced | None) -> FileResult:
    module = fast_tree.build(reduced.text if reduced is not None else source.text)
    return _lint_module(source, rules, module, reduced, lambda: module.positions)


# The stack an isolated child lints a tree deeper than the default allows on (a sum of twenty
# thousand terms, a chain of a thousand calls), and its recursion limit: the conversion and the
# analyses recurse once or a few times a level, ``ast.parse`` recurses in C up to three times the
# limit (on 3.11; 3.12 fixes its own, near two thousand terms), and libcst's parser is far slower
# on such a tree (quadratic: minutes, or a crash, at ten thousand terms). The stack is virtual
# memory, touched only as deep as the tree goes; a child whose stack this still overflows dies
# alone, and the file's error says so.
DEEP_STACK_BYTES = 1 << 30
DEEP_RECURSION_LIMIT = 200_000


def _isolated_answer(source: Source, rules: Sequence[type[Rule]], reduced: Reduced | None, deep: bool
                     ) -> tuple[list[Finding], list[Target], str | None]:
    """The lint of a file the fast tree gave up on, in an isolated child (``deadline.isolated``),
    less the text the parent already holds: on the fast tree again on a deep stack when it
    gave up for depth, else (or when that fails too) on libcst's tree."""
    result = None
    if deep:
        sys.setrecursionlimit(max(sys.getrecursionlimit(), DEEP_RECURSION_LIMIT))
        with suppress(*_NOT_FAST):
            result = _on_deep_stack(partial(_lint_fast, source, rules, reduced))
    if result is None:
        result = _lint_exact(source, rules, reduced)
    return result.findings, result.targets, result.error


def _on_deep_stack(function: Callable[[], FileResult]) -> FileResult:
    """``function()`` run on a thread whose C stack is ``DEEP_STACK_BYTES`` (the main thread's is
    the system's few megabytes, which a deep ``ast.parse`` overflows); what it raised is re-raised."""
    outcome: list[FileResult | BaseException] = []

    def run() -> None:
        try:
            outcome.append(function())
        except BaseException as error:  # re-raised in the calling thread
            outcome.append(error)

    previous = threading.stack_size(DEEP_STACK_BYTES)
    try:
        worker = threading.Thread(target=run, name="attncheck-deep-lint")
        worker.start()
    finally:
        threading.stack_size(previous)
    worker.join()
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def _lint_exact(source: Source, rules: Sequence[type[Rule]], reduced: Reduced | None) -> FileResult:
    """The lint of a file on libcst's own tree: the parse is native code that some inputs keep
    busy for minutes (nested ``match`` patterns, long operator chains), so ``lint`` runs this
    in a child process it can kill (``deadline.isolated``)."""
    parsed = _parse_exact(source, reduced)
    if isinstance(parsed, str):
        return FileResult(source, error=parsed)
    module, reduced = parsed
    layout = Layout(module, reduced.text if reduced is not None else source.text)
    return _lint_module(source, rules, module, reduced, layout.positions)


def _lint_module(
    source: Source,
    rules: Sequence[type[Rule]],
    module: cst.Module,
    reduced: Reduced | None,
    positions: Callable[[], Mapping[cst.CSTNode, object]],
) -> FileResult:
    result = FileResult(source)
    parsed_text = reduced.text if reduced is not None else source.text
    contains = memoized(parsed_text.__contains__)
    wanted = [rule for rule in rules if rule.wants(contains)]
    context = FileContext(source, module, reduced)
    if wanted:
        running = [rule(context) for rule in wanted]
        times_file = rule_timing.destination()
        seconds: dict[str, float] = {}
        if times_file is not None:
            rule_timing.instrument(running, seconds)
        providers = {p for rule in wanted for p in rule.get_inherited_dependencies()}
        walk.visit_batched(module, [_ScopeTracker(context), *running], LazyMetadata(module, providers, positions))
        if times_file is not None:
            rule_timing.append(times_file, source.path, seconds)
    result.findings = unsuppressed(context.findings, source)
    result.targets = find_targets(context)
    return result
