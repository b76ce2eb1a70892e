"""The shared state of one file's traversal: what every rule and analysis reads.

It lives apart from the engine so that analyses and rules name it without
importing the engine that runs them (the direction is tree <- facts <- context
<- analysis <- rules <- engine).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any, TypeVar

import libcst as cst

from attncheck.findings import Edit, Finding, Severity
from attncheck.sources import Source
from attncheck.static.facts import ClassFacts, FileFacts, FunctionFacts
from attncheck.static.tree.layout import line_starts
from attncheck.static.tree.regions import Reduced

T = TypeVar("T")


class FileContext:
    """Shared state of one file's traversal, handed to every rule.

    ``module`` may be parsed from only the attention-relevant lines of a large
    file (``regions``); ``file_line`` turns its line numbers into the file's.
    """

    def __init__(self, source: Source, module: cst.Module, reduced: Reduced | None = None) -> None:
        self.source = source
        self.module = module
        self.reduced = reduced
        self.findings: list[Finding] = []
        self.function_stack: list[FunctionFacts] = []
        self.class_stack: list[ClassFacts] = []
        self._shared: dict[Callable[[FileContext], Any], Any] = {}

    def shared(self, build: Callable[[FileContext], T]) -> T:
        """The one ``build(self)`` of this file.

        Analyses that several rules read (the semantics index, the tracer's
        per-function flows, the RoPE index) are built by the first rule that asks
        and reused by the others, and live exactly as long as the file's context.
        """
        if build not in self._shared:
            self._shared[build] = build(self)
        return self._shared[build]

    @cached_property
    def facts(self) -> FileFacts:
        return FileFacts(self.module)

    @property
    def function(self) -> FunctionFacts | None:
        """The innermost function being visited, if any."""
        return self.function_stack[-1] if self.function_stack else None

    @property
    def klass(self) -> ClassFacts | None:
        """The innermost class being visited, if any."""
        return self.class_stack[-1] if self.class_stack else None

    @cached_property
    def _line_starts(self) -> list[int]:
        return line_starts(self.source.text)

    def file_line(self, line: int) -> int:
        """The file's line number for a line of the parsed module."""
        return self.reduced.original_line(line) if self.reduced is not None else line

    def offset(self, line: int, column: int) -> int:
        """Character offset in the file of a module position (1-based line, 0-based column), for Edits."""
        return self._line_starts[self.file_line(line) - 1] + column

    def add(
        self,
        *,
        code: str,
        severity: Severity,
        message: str,
        start: tuple[int, int],
        end: tuple[int, int],
        hint: str | None = None,
        evidence: list[str] | None = None,
        fix: tuple[Edit, ...] = (),
        by_design: bool = False,
    ) -> None:
        target = None
        if self.klass is not None:
            target = self.klass.name
        elif self.function is not None:
            target = self.function.name
        self.findings.append(
            Finding(
                code=code,
                severity=severity,
                message=message,
                path=self.source.path,
                span=self.source.locate(self.file_line(start[0]), start[1], self.file_line(end[0]), end[1]),
                target=target,
                hint=hint,
                evidence=evidence or [],
                fix=fix,
                by_design=by_design,
            )
        )
