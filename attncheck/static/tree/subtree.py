"""Pre-order traversal of a libcst subtree that never touches trivia.

The per-function analyses of ``semantics`` and ``patterns`` (source order, the
arms of ``if`` statements, straight-line data flow, the ``self.`` attributes a
method reads) read every expression node of a function: one walk of it
(``Preorder``) lists them for all. Whitespace, comments, punctuation and
operator tokens are half of all nodes and none of them matters there, so
``fields(cls)`` keeps only the child fields of a node class whose declared type
can hold something other than trivia: a walk neither reads nor tests the rest
(``Call`` keeps ``func`` and ``args`` of its six fields). The visiting order of
the nodes it keeps is ``node_fields.children``'s.

``children`` is the inner loop of those walks, so each node class gets a reader
of its own, generated once from the declared field types (``[n.func, *n.args]``
for ``Call``), instead of a loop that tests every field of every node. Every
class without such fields (``Name``, numbers, strings: four nodes in ten) gets
the one reader ``no_children``, which a walk tests for by identity rather than
calling it.
"""

from __future__ import annotations

import collections.abc
import inspect
import sys
import typing
from collections.abc import Callable, Iterator
from functools import cache, cached_property
from typing import Any

import libcst as cst

from attncheck.static.tree import node_fields


def _concrete_subclasses(cls: type) -> Iterator[type]:
    """Every class a node of type ``cls`` can have: not abstract, and not shadowed by another
    class of its name (libcst's ``add_slots`` rebuilds each node class and leaves the
    slot-less original behind as a subclass of its bases)."""
    named = getattr(sys.modules.get(cls.__module__), cls.__qualname__, None)
    if not inspect.isabstract(cls) and (named is None or named is cls):
        yield cls
    for sub in cls.__subclasses__():
        yield from _concrete_subclasses(sub)


@cache
def _concrete_of(cls: type) -> frozenset[type]:
    """``_concrete_subclasses(cls)``, kept: generating the readers asks it of every field's
    declared type, a walk over libcst's class tree each time."""
    return frozenset(_concrete_subclasses(cls))


def concrete(*bases: type) -> frozenset[type]:
    """The classes a node of one of ``bases`` can have: a test of ``type(node)`` against them
    is several times cheaper than ``isinstance`` against libcst's abstract classes."""
    return frozenset(sub for base in bases for sub in _concrete_subclasses(base))


_NOTHING = (type(None), cst.MaybeSentinel)


def _holds_only(annotation: object, kinds: frozenset[type]) -> bool:
    """Whether a field declared as ``annotation`` can only hold nodes of ``kinds`` (or nothing)."""
    if isinstance(annotation, type):
        if not issubclass(annotation, cst.CSTNode):
            return annotation in _NOTHING
        return _concrete_of(annotation) <= kinds
    arguments = typing.get_args(annotation)
    return bool(arguments) and all(_holds_only(a, kinds) for a in arguments)


@cache
def _hints(cls: type) -> dict[str, object] | None:
    """The declared types of ``cls``'s fields (kept: ``fields_beyond`` and ``_generated_reader`` ask them)."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an annotation this libcst version cannot resolve
        return None


@cache
def fields_beyond(cls: type[cst.CSTNode], skipped: frozenset[type]) -> tuple[str, ...] | None:
    """The child fields of ``cls``, in visiting order, less those whose declared type admits
    only nodes of ``skipped`` (None: unknown). A walk that never descends into ``skipped``
    need not read the others."""
    every = node_fields.child_fields(cls)
    hints = _hints(cls)
    if every is None or hints is None:
        return every
    return tuple(name for name in every if name not in hints or not _holds_only(hints[name], skipped))


def fields(cls: type[cst.CSTNode]) -> tuple[str, ...] | None:
    """The child fields of ``cls`` that may hold non-trivia, in visiting order (None: unknown)."""
    return fields_beyond(cls, node_fields.TRIVIA)


def _shape(annotation: object) -> str | None:
    """How a field holds its children, when it never holds trivia: "one" node, "either" of
    several node classes, "many" (a sequence), "maybe" (a node or None/MaybeSentinel); None
    when the reader must test."""
    if isinstance(annotation, type):
        never_trivia = issubclass(annotation, cst.CSTNode) and _concrete_of(annotation).isdisjoint(node_fields.TRIVIA)
        return "one" if never_trivia else None
    arguments = typing.get_args(annotation)
    if typing.get_origin(annotation) is collections.abc.Sequence:
        return "many" if [_shape(a) for a in arguments] in (["one"], ["either"]) else None
    if typing.get_origin(annotation) is typing.Union:
        shapes = {_shape(a) for a in arguments if a not in _NOTHING}
        if shapes == {"one"}:
            return "maybe" if any(a in _NOTHING for a in arguments) else "either"
    return None


_TRIVIA = node_fields.TRIVIA
_DEFAULT = cst.MaybeSentinel.DEFAULT


def _tested(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The reader for a class whose fields are not all known to hold non-trivia nodes."""
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


Reader = Callable[[cst.CSTNode], "list[cst.CSTNode]"]


def no_children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The reader of every class whose fields hold only trivia: a walk that finds it in
    ``READERS`` knows the node is a leaf without calling it."""
    return []


class _Readers(dict[type, Reader]):
    """``READERS[type(node)](node)``: the children of ``node``, one dict lookup and one call
    (what the hottest walks do per node, rather than calling ``children``)."""

    def __missing__(self, cls: type[cst.CSTNode]) -> Reader:
        self[cls] = found = _generated_reader(cls)
        return found


READERS = _Readers()


def reader(cls: type[cst.CSTNode]) -> Reader:
    """The function giving a ``cls`` node's non-trivia children, generated once per class."""
    return READERS[cls]


def _generated_reader(cls: type[cst.CSTNode]) -> Reader:
    names, hints = fields(cls), _hints(cls)
    shapes = [_shape(hints[name]) if hints and name in hints else None for name in names or ()]
    if names is None or None in shapes:
        found = _tested
    elif not names:
        found = no_children
    else:
        lines = ["def read(n):", "    out = []"]
        for name, shape in zip(names, shapes, strict=True):
            if shape in ("one", "either"):
                lines.append(f"    out.append(n.{name})")
            elif shape == "many":
                lines.append(f"    out.extend(n.{name})")
            else:
                lines += [f"    v = n.{name}", "    if v is not None and v is not DEFAULT:", "        out.append(v)"]
        lines.append("    return out")
        namespace: dict[str, object] = {"DEFAULT": _DEFAULT}
        exec("\n".join(lines), namespace)  # the source is built above from field names
        found = namespace["read"]  # type: ignore[assignment]
    return found


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The children of ``node`` that are not trivia, in visiting order (a new list)."""
    return READERS[type(node)](node)


def preorder(root: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``root`` and every non-trivia node under it, parents before children, in source order."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        found = children(node)
        found.reverse()
        stack.extend(found)


class Preorder:
    """``nodes``: ``root`` and every non-trivia node under it in pre-order, so that a subtree's
    nodes come in a row, from the subtree's root on; ``marked``: (the index, the node, the
    index just past its subtree) of each node of the ``MARKED`` classes, in the order their
    subtrees end. Built once per function (``facts.FunctionFacts.preorder``): the analyses of
    a function read these lists rather than each walking the tree, a Python call per node."""

    # The classes whose subtrees the analyses ask the extent of: the arms of branches and the
    # loops, nested scopes, and the statements that write names.
    MARKED = frozenset({cst.If, cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda,
                        cst.Assign, cst.AnnAssign, cst.AugAssign})

    def __init__(self, root: cst.CSTNode) -> None:
        nodes: list[cst.CSTNode] = []
        marked: list[tuple[int, cst.CSTNode, int]] = []
        stack: list[Any] = [root]  # (index, node): where node's subtree ends
        record, readers, leaf, kinds = nodes.append, READERS, no_children, self.MARKED
        while stack:
            node = stack.pop()
            kind = type(node)
            if kind is tuple:
                marked.append((node[0], node[1], len(nodes)))
                continue
            record(node)
            read = readers[kind]
            if read is leaf:
                continue
            if kind in kinds:  # none of them a leaf
                stack.append((len(nodes) - 1, node))
            found = read(node)
            found.reverse()
            stack.extend(found)
        self.nodes = nodes
        self.marked = marked

    @cached_property
    def where(self) -> dict[int, int]:
        """The index of each node, by id (built when first asked: not every analysis does)."""
        return dict(zip(map(id, self.nodes), range(len(self.nodes)), strict=True))
