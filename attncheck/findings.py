"""The one vocabulary every stage speaks: findings, targets and their checks.

Static rules, the dynamic checker, the merge step and every reporter exchange
these plain dataclasses and nothing else, so that a new output format or a new
probe never needs to know how the others work.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Literal

SourceKind = Literal["static", "dynamic", "both"]
TargetStatus = Literal["passed", "failed", "skipped", "error"]
CheckStatus = Literal["passed", "failed", "skipped", "error"]


class Severity(enum.IntEnum):
    """Ordered so that ``severity >= Severity.WARNING`` reads naturally."""

    INFO = 0
    WARNING = 1
    ERROR = 2

    def __str__(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Severity:
        return cls[text.strip().upper()]


@dataclass(frozen=True)
class Span:
    """A region of a source file; lines and columns are 1-based, end inclusive.

    ``cell`` is set for notebooks: the 1-based index of the code cell, with
    ``line`` counted inside that cell.
    """

    line: int
    column: int = 1
    end_line: int | None = None
    end_column: int | None = None
    cell: int | None = None


@dataclass(frozen=True)
class Edit:
    """A replacement of source text, produced by rules that can fix themselves.

    Offsets index the file's text (not a notebook cell); ``--fix`` applies the
    edits of a file from the last to the first.
    """

    start: int
    end: int
    replacement: str


@dataclass
class Finding:
    """One mistake at one place, found statically, dynamically or both."""

    code: str
    severity: Severity
    message: str
    path: str
    span: Span
    source: SourceKind = "static"
    target: str | None = None
    hint: str | None = None
    evidence: list[str] = field(default_factory=list)
    fix: tuple[Edit, ...] = ()
    # The static pass judged the construct deliberate (T5's documented unscaled scores, a rotation
    # flip its docstring declares): it is reported, but it claims no mistake, so a dynamic run that
    # matches the declared design confirms it rather than raising or refuting it.
    by_design: bool = False

    @property
    def line(self) -> int:
        return self.span.line

    def with_source(self, source: SourceKind) -> Finding:
        return replace(self, source=source)


@dataclass(frozen=True)
class Parameter:
    """A parameter of a constructor, forward method or bare function."""

    name: str
    default: str | None = None  # the default's source text, None when required
    annotation: str | None = None
    kind: Literal["positional", "keyword", "var_positional", "var_keyword"] = "positional"


@dataclass
class Target:
    """An attention implementation the static pass found, for the dynamic pass.

    ``kinds`` is a guess from the code (``mha``, ``self``, ``cross``, ``gqa``,
    ``rope``, ``causal``, ``function``); the dynamic binder treats it as a hint,
    never as truth.
    """

    path: str
    name: str
    line: int
    kinds: tuple[str, ...]
    is_class: bool
    init_params: tuple[Parameter, ...] = ()
    forward_params: tuple[Parameter, ...] = ()
    mask_param: str | None = None
    docstring: str | None = None
    config_class: str | None = None  # a class of the same file the constructor takes


@dataclass
class Check:
    """One named dynamic check on one target."""

    name: str
    status: CheckStatus
    detail: str = ""


@dataclass
class TargetResult:
    """What the dynamic stage concluded about a target."""

    target: Target
    status: TargetStatus
    reason: str = ""
    checks: list[Check] = field(default_factory=list)
    device: str | None = None
    isolation: str | None = None  # how the child was jailed: "bubblewrap", "rlimits only", "in-process"
    # Static codes of this target the dynamic check was able to see on its inputs and did not see,
    # each with how it could see it: the only findings the merge may downgrade.
    refuted: dict[str, str] = field(default_factory=dict)
