"""One module per rule. ``all_rules()`` imports them all and returns the classes by code."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from attncheck.static.rule import Rule


@cache
def all_rules() -> tuple[type[Rule], ...]:
    """Every rule class of this package, sorted by code."""
    found: dict[str, type[Rule]] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Rule) and value.__dict__.get("code"):
                found[value.code] = value
    return tuple(found[code] for code in sorted(found))
