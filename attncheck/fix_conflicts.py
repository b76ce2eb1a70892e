"""Fixes that would keep a mistake another rule reports at the same place are not offered.

A rule's fix repairs its own mistake and leaves the expression's meaning otherwise as it
was. Where another rule says that meaning is wrong too, the fix would enshrine that
mistake in code that now looks deliberate: ATT204's fix turns ``torch.sqrt(S)`` into
``math.sqrt(S)``, which runs, but when ATT201 says S is the sequence length the scale is
still wrong, and only the user knows the head dim to put there. So such a finding keeps
its report and hint and loses its fix (no ``[*]``, nothing written by ``--fix``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from attncheck.findings import Finding, Span

# code -> codes whose finding, where it overlaps, says the fix's operand is itself wrong
KEEPS_MISTAKE_OF = {"ATT204": ("ATT201",)}


def withhold(findings: Sequence[Finding]) -> list[Finding]:
    """``findings`` with the fixes that would keep another finding's mistake removed."""
    kept = []
    for finding in findings:
        vetoes = KEEPS_MISTAKE_OF.get(finding.code, ())
        if finding.fix and any(other.code in vetoes and other.path == finding.path
                               and _overlap(other.span, finding.span) for other in findings):
            finding = replace(finding, fix=())
        kept.append(finding)
    return kept


def _overlap(a: Span, b: Span) -> bool:
    if a.cell != b.cell:
        return False
    a_end = (a.end_line or a.line, a.end_column or a.column)
    b_end = (b.end_line or b.line, b.end_column or b.column)
    return (a.line, a.column) <= b_end and (b.line, b.column) <= a_end
