"""The base class of every static rule.

A rule is one libcst visitor in its own module. Like Fixit's rules it carries
its own VALID and INVALID examples, which the test suite runs, so a rule's
documentation, behaviour and tests cannot drift apart. All rules of a run are
batched into a single traversal of each file (``libcst.BatchableCSTVisitor``),
and the engine resolves only the metadata providers the selected rules ask for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import libcst as cst
from libcst.metadata import PositionProvider

from attncheck.catalogue import CODES
from attncheck.findings import Edit, Severity
from attncheck.static.tree import walk

if TYPE_CHECKING:
    from attncheck.static.context import FileContext


@dataclass(frozen=True)
class Invalid:
    """An example a rule must flag: the code, and optionally the 1-based line
    of the finding, a substring of its message, and (for a rule with a fix) the
    whole text after its ``--fix`` (Fixit's ``expected_replacement``), which the
    example test applies, compares and relints."""

    code: str
    line: int | None = None
    message: str | None = None
    severity: Severity | None = None
    fixed: str | None = None


def visitor_methods(visitor: cst.BatchableCSTVisitor) -> Mapping[str, cst.BatchableCSTVisitor]:
    """``BatchableCSTVisitor.get_visitors`` with the method names cached per class.

    libcst finds them with ``inspect.getmembers`` over some 1,600 stubs on every
    call, about 10 ms per visitor per file: most of the time of a small file.
    """
    return {name: getattr(visitor, name) for name in walk.own_methods(type(visitor))}


class Rule(cst.BatchableCSTVisitor):
    """Subclass, set ``code`` (a catalogue code) and write ``visit_*`` methods.

    ``PREFILTER`` lists substrings of which at least one must occur in a file's
    text for the rule to run on it: a cheap way to skip files that cannot
    contain the mistake.
    """

    code: ClassVar[str]
    METADATA_DEPENDENCIES: ClassVar[Sequence[type]] = (PositionProvider,)
    PREFILTER: ClassVar[tuple[str, ...]] = ()
    VALID: ClassVar[Sequence[str]] = ()
    INVALID: ClassVar[Sequence[Invalid]] = ()

    def __init__(self, context: FileContext) -> None:
        super().__init__()
        self.context = context

    def get_visitors(self) -> Mapping[str, cst.BatchableCSTVisitor]:
        return visitor_methods(self)

    @classmethod
    def wants(cls, contains: Callable[[str], bool]) -> bool:
        """Whether a text holds one of ``PREFILTER``, asked through ``contains`` (the text's own
        ``__contains__``, memoized by the engine: rules share words, and an absent word is a
        scan of the whole text)."""
        return not cls.PREFILTER or any(map(contains, cls.PREFILTER))

    @property
    def name(self) -> str:
        return CODES[self.code].name

    def report(
        self,
        node: cst.CSTNode,
        message: str,
        *,
        severity: Severity | None = None,
        hint: str | None = None,
        evidence: Sequence[str] = (),
        fix: Sequence[Edit] = (),
        by_design: bool = False,
    ) -> None:
        """Record a finding at ``node``'s position, in the user's coordinates (``by_design``: see Finding)."""
        position = self.get_metadata(PositionProvider, node)
        self.context.add(
            code=self.code,
            severity=severity if severity is not None else CODES[self.code].severity,
            message=message,
            start=(position.start.line, position.start.column + 1),
            end=(position.end.line, position.end.column),
            hint=hint,
            evidence=list(evidence),
            fix=tuple(fix),
            by_design=by_design,
        )
