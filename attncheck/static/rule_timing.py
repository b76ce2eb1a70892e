"""Opt-in time per rule, like Fixit's visitor timing: which rule a slow run spends its time in.

Set ``ATTNCHECK_RULE_TIMES`` to a file and every linted file appends one JSON line to
it: ``{"path": ..., "seconds": {"ATT201": ..., ...}}``, the time spent in each rule's
``visit_*``/``leave_*`` methods (an analysis shared through ``FileContext.shared`` is
charged to the first rule that asks for it). Each worker process appends its own lines.
``bench/static.py --per-rule`` sums them. Unset, the engine does nothing more than read
the variable once per file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from attncheck.static.rule import Rule

ENVIRONMENT_VARIABLE = "ATTNCHECK_RULE_TIMES"


def destination() -> str | None:
    """The file to append this run's rule times to, or None when timing is off."""
    return os.environ.get(ENVIRONMENT_VARIABLE) or None


def _timed(method: Callable[..., Any], code: str, seconds: dict[str, float]) -> Callable[..., Any]:
    def timed(*args: Any) -> Any:
        start = time.perf_counter()
        try:
            return method(*args)
        finally:
            seconds[code] = seconds.get(code, 0.0) + time.perf_counter() - start

    return timed


def instrument(rules: Iterable[Rule], seconds: dict[str, float]) -> None:
    """Make each rule's visitor methods add their time to ``seconds[rule.code]``."""
    for rule in rules:
        methods: Mapping[str, Callable[..., Any]] = rule.get_visitors()
        timed = {name: _timed(method, rule.code, seconds) for name, method in methods.items()}
        rule.get_visitors = lambda timed=timed: timed  # type: ignore[method-assign]
        seconds.setdefault(rule.code, 0.0)


def append(path: str, linted: str, seconds: Mapping[str, float]) -> None:
    """Append one file's rule times to ``path`` as a JSON line."""
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps({"path": linted, "seconds": dict(seconds)}) + "\n")
