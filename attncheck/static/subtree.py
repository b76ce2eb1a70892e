"""Pre-order traversal of a libcst subtree that never touches trivia.

The per-function analyses of ``semantics`` and ``patterns`` (source order, the
arms of ``if`` statements, straight-line data flow) visit every expression
node of a function, once per function. Whitespace, comments, punctuation and
operator tokens are half of all nodes and none of them matters there, so
``fields(cls)`` keeps only the child fields of a node class whose declared type
can hold something other than trivia: a walk neither reads nor tests the rest
(``Call`` keeps ``func`` and ``args`` of its six fields). The visiting order of
the nodes it keeps is ``walk.children``'s.
"""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Iterator
from functools import cache

import libcst as cst

from attncheck.static import walk


def _concrete_subclasses(cls: type) -> Iterator[type]:
    """Every class that can be instantiated as ``cls``. libcst's ``add_slots`` rebuilds each
    node class, leaving the original behind as a subclass of its bases: the module holds the
    class in use."""
    module = sys.modules.get(cls.__module__)
    if not inspect.isabstract(cls) and getattr(module, cls.__qualname__, None) is cls:
        yield cls
    for sub in cls.__subclasses__():
        yield from _concrete_subclasses(sub)


def _only_trivia(annotation: object) -> bool:
    """Whether a field declared as ``annotation`` can only hold trivia (or nothing)."""
    if isinstance(annotation, type):
        if not issubclass(annotation, cst.CSTNode):
            return annotation in (type(None), cst.MaybeSentinel)
        return all(sub in walk.TRIVIA for sub in _concrete_subclasses(annotation))
    arguments = typing.get_args(annotation)
    return bool(arguments) and all(_only_trivia(a) for a in arguments)


@cache
def fields(cls: type[cst.CSTNode]) -> tuple[str, ...] | None:
    """The child fields of ``cls`` that may hold non-trivia, in visiting order (None: unknown)."""
    every = walk.child_fields(cls)
    if every is None:
        return None
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # an annotation libcst's version cannot resolve: keep every field
        return every
    return tuple(name for name in every if name not in hints or not _only_trivia(hints[name]))


_TRIVIA = walk.TRIVIA
_DEFAULT = cst.MaybeSentinel.DEFAULT


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The children of ``node`` that are not trivia, in visiting order."""
    names = fields(type(node))
    if names is None:
        return [c for c in node.children if type(c) not in _TRIVIA]
    found: list[cst.CSTNode] = []
    for name in names:
        value = getattr(node, name)
        kind = type(value)
        if kind is tuple or kind is list:
            found.extend(c for c in value if type(c) not in _TRIVIA)
        elif value is not None and value is not _DEFAULT and kind not in _TRIVIA:
            found.append(value)
    return found


def preorder(root: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``root`` and every non-trivia node under it, parents before children, in source order."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        found = children(node)
        found.reverse()
        stack.extend(found)
