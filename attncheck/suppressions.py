"""Suppression comments, read without libcst or torch.

``# attncheck: ignore`` and a bare ``# noqa`` hide every finding on their line;
``# attncheck: ignore[ATT201, ATT3]`` and ``# noqa: ATT204`` hide those codes (or
prefixes). A ``noqa`` that names only other tools' codes (``# noqa: E501``) hides
nothing of ours. A code in ``ignore[...]`` that attncheck does not know (a typo,
or a rule's name where its code belongs) would hide nothing, so the run warns about it.

A comment hides what is reported on its line, whichever pass found it: a dynamic finding located
at the line of the user's code that raised (``torch.sqrt(64)  # noqa: ATT204``) is hidden like
the static one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from attncheck.findings import Finding
from attncheck.line_table import split_lines
from attncheck.sources import Source

SUPPRESSION = re.compile(
    r"#\s*(?:attncheck:\s*ignore(?:\[(?P<codes>[^\]]*)\])?"
    r"|noqa(?::\s*(?P<noqa>ATT\d+(?:\s*,\s*ATT\d+)*)|(?!\s*:)\b))",
    re.IGNORECASE,
)


def unsuppressed(findings: Sequence[Finding], source: Source) -> list[Finding]:
    """``findings`` of ``source`` less those a suppression comment on their line hides."""
    if not findings:
        return []  # most files: no need to read their comments
    hidden = _suppressed_codes(source.text)

    def is_hidden(finding: Finding) -> bool:
        line = source.file_line(finding.span)
        if line not in hidden:
            return False
        codes = hidden[line]
        return codes is None or any(finding.code.startswith(code) for code in codes)

    return [f for f in findings if not is_hidden(f)]


def _suppressed_codes(text: str) -> dict[int, set[str] | None]:
    """Line -> the codes (or prefixes) its comments hide; None for every code."""
    suppressed: dict[int, set[str] | None] = {}
    for number, line in enumerate(split_lines(text), start=1):
        if "#" not in line:
            continue
        for match in SUPPRESSION.finditer(line):
            codes = match.group("codes") or match.group("noqa")
            if codes is None:
                suppressed[number] = None  # every code
            elif suppressed.get(number, set()) is not None:
                parsed = {c.strip().upper() for c in codes.split(",") if c.strip()}
                suppressed.setdefault(number, set()).update(parsed)
    return suppressed


def unknown_codes(text: str) -> Iterator[tuple[int, str]]:
    """(line, code) for each code of an ``attncheck: ignore[...]`` that is no code or prefix of the catalogue."""
    if "ignore[" not in text:
        return
    from attncheck.catalogue import CODES

    for number, line in enumerate(text.splitlines(), start=1):
        if "ignore[" not in line:
            continue
        for match in SUPPRESSION.finditer(line):
            for part in (match.group("codes") or "").split(","):
                code = part.strip()
                if code and not any(known.startswith(code.upper()) for known in CODES):
                    yield number, code
