"""Suppression comments, read without libcst or torch.

``# attncheck: ignore`` and a bare ``# noqa`` hide every finding on their line;
``# attncheck: ignore[ATT201, ATT3]`` and ``# noqa: ATT204`` hide those codes (or
prefixes). A ``noqa`` that names only other tools' codes (``# noqa: E501``) hides
nothing of ours. A code in ``ignore[...]`` that attncheck does not know (a typo,
or a rule's name where its code belongs) would hide nothing, so the run warns about it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

SUPPRESSION = re.compile(
    r"#\s*(?:attncheck:\s*ignore(?:\[(?P<codes>[^\]]*)\])?"
    r"|noqa(?::\s*(?P<noqa>ATT\d+(?:\s*,\s*ATT\d+)*)|(?!\s*:)\b))",
    re.IGNORECASE,
)


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
