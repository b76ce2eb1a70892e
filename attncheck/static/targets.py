"""Attention implementations found in a file, described for the dynamic stage.

Placeholder until the target finder lands (issue 2): it finds nothing yet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attncheck.findings import Target

if TYPE_CHECKING:
    from attncheck.static.engine import FileContext


def find_targets(context: FileContext) -> list[Target]:
    return []
