"""libcst nodes built without libcst's validation, for trees and expressions made from valid parts.

A libcst node's constructor is a frozen dataclass's ``__init__`` followed by a
validation of the node, several times the cost of the node itself. ``fast_tree``
builds about a million nodes a lint from text Python has parsed, and the
analyses build expressions of their own from parsed nodes (``facts.element``:
``t[0]`` for ``a, b = t``); neither needs the check. ``new[cst.Name](value="x")``
builds a ``cst.Name`` with libcst's defaults for the fields not given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import libcst as cst


class _Constructors(dict[type, Callable[..., Any]]):
    """Per node class, a function building an instance from keyword fields, with libcst's
    defaults for the rest.

    Each function is generated once per class, with one slot write per field and nothing
    else: several times cheaper than a loop over the fields or the frozen dataclass's
    ``__init__``.
    """

    def __missing__(self, cls: type[cst.CSTNode]) -> Callable[..., Any]:
        namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
        parameters, writes = [], []
        for index, field in enumerate(dataclasses.fields(cls)):
            name = field.name
            if field.default is not dataclasses.MISSING:
                namespace[f"default{index}"] = field.default
                parameters.append(f"{name}=default{index}")
            elif field.default_factory is not dataclasses.MISSING:
                namespace[f"default{index}"] = field.default_factory()  # one shared, never mutated
                parameters.append(f"{name}=default{index}")
            else:
                parameters.append(name)
            namespace[f"write{index}"] = _slot(cls, name).__set__
            writes.append(f"    write{index}(node, {name})\n")
        signature = f"*, {', '.join(parameters)}" if parameters else ""
        source = f"def construct({signature}):\n    node = new(cls)\n{''.join(writes)}    return node\n"
        exec(source, namespace)  # built above from the dataclass's own field names
        self[cls] = constructor = namespace["construct"]
        return constructor


def _slot(cls: type, name: str) -> Any:
    """The slot descriptor of field ``name`` (libcst's node classes are slotted dataclasses)."""
    return next(vars(base)[name] for base in cls.__mro__ if hasattr(vars(base).get(name), "__set__"))


new = _Constructors()
