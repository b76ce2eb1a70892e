"""``--statistics``: how many findings of each code, most first, as ruff's; then the summary line.

``[*]`` marks the codes whose findings ``--fix`` can fix.
"""

from __future__ import annotations

from collections import Counter
from typing import TextIO

from attncheck.catalogue import CODES
from attncheck.pipeline import Outcome
from attncheck.report import plain_file_errors, summary_line


def write(outcome: Outcome, stream: TextIO, *, color: bool = False) -> None:
    plain_file_errors(outcome, stream)
    counts = Counter(f.code for f in outcome.findings)
    fixable = {f.code for f in outcome.findings if f.fix}
    width = len(str(max(counts.values(), default=0)))
    for code, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        info = CODES.get(code)
        mark = "[*] " if code in fixable else ""
        stream.write(f"{count:>{width}}  {code}  {mark}{info.name if info else code}\n")
    stream.write(summary_line(outcome) + "\n")
