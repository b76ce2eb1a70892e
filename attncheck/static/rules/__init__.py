"""One module per rule, in one folder per family (``att1_projections``, ``att2_scores``,
``att3_masks``, ``att4_gqa_rope``) beside the helpers only that family uses.
``all_rules()`` imports every module of every family and returns the rule classes by code."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from attncheck.static.rule import Rule


@cache
def all_rules() -> tuple[type[Rule], ...]:
    """Every rule class of this package, sorted by code."""
    found: dict[str, type[Rule]] = {}
    for info in pkgutil.walk_packages(__path__, prefix=f"{__name__}."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            # ``Rule in __mro__``, not issubclass: on Python 3.10 a module-level alias such as
            # ``list[str]`` passes ``isinstance(value, type)`` and issubclass raises on it
            if Rule in getattr(value, "__mro__", ()) and value.__dict__.get("code"):
                found[value.code] = value
    return tuple(found[code] for code in sorted(found))
