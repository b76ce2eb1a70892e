"""What the static pass learned about one file, in a module that imports no
libcst, so a run answered from the cache never loads the parser."""

from __future__ import annotations

from dataclasses import dataclass, field

from attncheck.findings import Finding, Target
from attncheck.sources import Source


@dataclass
class FileResult:
    """What the static pass learned about one file."""

    source: Source
    findings: list[Finding] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    error: str | None = None  # a file that could not be linted, said plainly
