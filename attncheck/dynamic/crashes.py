"""Name the mistake behind a crash: some exceptions are the signature of one catalogue code.

A forward that raises is ATT901 in any case; the message and the line it came
from often say more (``torch.sqrt`` on an int is ATT204, a ``.view`` of a
transposed tensor is ATT106, a broadcast failure inside the rotary code is
ATT403). The crash keeps its ATT901; these codes are added beside it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_ROPE = re.compile(r"rope|rotary|rotate|\bcos\b|\bsin\b|freqs?", re.IGNORECASE)
_BROADCAST = re.compile(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)")


@dataclass(frozen=True)
class Diagnosis:
    """A catalogue code a crash shows, and why."""

    code: str
    message: str


def diagnose(error: Mapping[str, Any], source_line: str) -> list[Diagnosis]:
    """The codes an error (type, message, function) raised at ``source_line`` is evidence of."""
    kind, message = str(error.get("type", "")), str(error.get("message", ""))
    found: list[Diagnosis] = []
    if kind == "TypeError" and "sqrt()" in message and re.search(r"not (int|float)", message):
        found.append(Diagnosis("ATT204", "torch.sqrt is given a Python number and raises TypeError"))
    if "view size is not compatible" in message:
        found.append(Diagnosis("ATT106", "`.view` on a transposed (non-contiguous) tensor raises: use .reshape"))
    broadcast = _BROADCAST.search(message)
    where = f"{error.get('function') or ''} {source_line}"
    if broadcast and _ROPE.search(where):
        a, b = broadcast.groups()
        found.append(
            Diagnosis(
                "ATT403",
                f"the rotary cos/sin tables have the wrong width: {a} vs {b} in `{source_line.strip()}`",
            )
        )
    if "cannot be converted to type c10::Half without overflow" in message:
        found.append(Diagnosis("ATT302", "the mask fill value overflows float16"))
    return found
