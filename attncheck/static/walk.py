"""Read-only traversal of libcst trees, several times faster than ``CSTNode.visit``.

libcst's own ``visit`` serves transformers as well as visitors, so it rebuilds
(and validates) every node it passes, and ``node.children`` runs that same
machinery: on attention code that was most of the time of a lint. Reading the
fields directly visits the same nodes in the same order (the order of each
class's ``_visit_and_replace_children``), with the same ``visit_*``/``leave_*``
calls, and builds nothing.

- ``visit(node, visitor)`` stands in for ``node.visit(visitor)`` with a
  ``CSTVisitor``: a ``visit_*`` returning False skips the children, ``leave_*``
  still runs.
- ``visit_batched(node, visitors, metadata)`` stands in for
  ``MetadataWrapper.visit_batched``: return values are ignored, as in libcst,
  and each visitor's ``metadata`` is the given mapping for the walk.
- ``children(node)`` stands in for ``node.children``.

Whitespace, comments and punctuation are not walked unless a visitor asks for
their type: no rule looks at them, and they are half of all nodes. A visitor
that overrides ``on_visit`` sees every node, as before.

The field order comes from ``cst_fields`` (generated from the installed libcst,
checked by a test); for another libcst version it is read from libcst's source
once per class, and where that fails ``node.children`` is used.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable, Iterable, Mapping
from functools import cache

import libcst as cst
from libcst._nodes import op as _op
from libcst._nodes import whitespace as _whitespace
from libcst._version import __version__ as libcst_version

from attncheck.static import cst_fields

_HELPERS = frozenset({
    "visit_required", "visit_optional", "visit_sentinel", "visit_iterable",
    "visit_sequence", "visit_body_iterable", "visit_body_sequence",
})
_SEQUENCES = (tuple, list)
_ABSENT = (None, cst.MaybeSentinel.DEFAULT)

TRIVIA: frozenset[type] = frozenset(
    value
    for module in (_op, _whitespace)
    for value in vars(module).values()
    if isinstance(value, type) and issubclass(value, cst.CSTNode) and not inspect.isabstract(value)
) | {cst.LeftParen, cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket,
     cst.LeftCurlyBrace, cst.RightCurlyBrace}

Callback = Callable[[cst.CSTNode], object]


def derive_fields(cls: type[cst.CSTNode]) -> tuple[str, ...] | None:
    """The fields ``cls._visit_and_replace_children`` visits, in its order, read
    from its source; None when the source cannot be read."""
    method = cls._visit_and_replace_children
    if getattr(method, "__qualname__", "").split(".")[0] in ("CSTNode", "BaseLeaf"):
        return ()
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    except (OSError, TypeError, SyntaxError):
        return None
    calls = sorted(
        (node for node in ast.walk(tree) if isinstance(node, ast.Call)),
        key=lambda node: (node.lineno, node.col_offset),
    )
    fields: list[str] = []
    for call in calls:
        if (
            isinstance(call.func, ast.Name)
            and call.func.id in _HELPERS
            and len(call.args) >= 2
            and isinstance(call.args[1], ast.Constant)
            and call.args[1].value not in fields
        ):
            fields.append(call.args[1].value)
    return tuple(fields)


@cache
def child_fields(cls: type[cst.CSTNode]) -> tuple[str, ...] | None:
    """The fields of ``cls`` that hold children, in visiting order (None: unknown)."""
    name = _libcst_class(cls).__name__
    if libcst_version == cst_fields.LIBCST_VERSION and name in cst_fields.FIELDS:
        return cst_fields.FIELDS[name]
    return derive_fields(cls)


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """``node.children``, without rebuilding ``node``."""
    fields = child_fields(type(node))
    if fields is None:
        return list(node.children)
    found: list[cst.CSTNode] = []
    for name in fields:
        value = getattr(node, name)
        if type(value) in _SEQUENCES:
            found.extend(value)
        elif value not in _ABSENT:
            found.append(value)
    return found


def _callbacks(visitors: Iterable[cst.BatchableCSTVisitor]) -> dict[str, list[Callback]]:
    table: dict[str, list[Callback]] = {}
    for visitor in visitors:
        for name, method in visitor.get_visitors().items():
            table.setdefault(name, []).append(method)
    return table


Plan = tuple[tuple[Callback, ...], tuple[Callback, ...], "tuple[str, ...] | None"]


class _Walker:
    """One walk: per node class, the callbacks to run and the fields to follow.

    ``every`` is an (on_visit, on_leave) pair run on every node, for a visitor
    that overrides those hooks; trivia are walked only when ``trivia`` is True
    or a callback asks for their type.
    """

    def __init__(self, table: Mapping[str, list[Callback]], *, prune: bool,
                 every: tuple[Callback, Callback] | None = None, trivia: bool = False) -> None:
        self.table = table
        self.prune = prune  # a visit callback returning False skips the children
        self.every = every
        asked = {name.split("_", 1)[1] for name in table}
        # Trivia nest (a comment sits in an EmptyLine): asking for any walks them all.
        walks_trivia = trivia or any(c.__name__ in asked for c in TRIVIA)
        self.skip = frozenset() if walks_trivia else TRIVIA
        self.plans: dict[type, Plan] = {}

    def plan(self, cls: type) -> Plan:
        if self.every is not None:
            found = ((self.every[0],), (self.every[1],), child_fields(cls))
        else:
            name = _libcst_class(cls).__name__
            found = (
                tuple(self.table.get(f"visit_{name}", ())),
                tuple(self.table.get(f"leave_{name}", ())),
                child_fields(cls),
            )
        self.plans[cls] = found
        return found

    def walk(self, node: cst.CSTNode) -> None:
        visits, leaves, fields = self.plans.get(type(node)) or self.plan(type(node))
        descend = True
        for callback in visits:
            if callback(node) is False and self.prune:
                descend = False
        if descend:
            skip = self.skip
            if fields is None:
                for child in node.children:
                    if type(child) not in skip:
                        self.walk(child)
            else:
                for name in fields:
                    value = getattr(node, name)
                    if type(value) in _SEQUENCES:
                        for child in value:
                            if type(child) not in skip:
                                self.walk(child)
                    elif value not in _ABSENT and type(value) not in skip:
                        self.walk(value)
        for callback in leaves:
            callback(node)


@cache
def _libcst_class(cls: type) -> type:
    """The libcst class a node class stands for: itself, or the one it extends
    (``fast_tree.FastModule`` is visited as a ``Module``)."""
    return next((base for base in cls.__mro__ if base.__module__.startswith("libcst.")), cls)


def _is_attribute_hook(name: str) -> bool:
    """``visit_Call_func``: a per-attribute callback, which this walker does not run."""
    return name.count("_") >= 2


@cache
def _own_methods(cls: type) -> tuple[str, ...]:
    """The ``visit_*``/``leave_*`` methods ``cls`` really defines (not libcst's no-op stubs)."""
    return tuple(
        name for name in dir(cls)
        if name.startswith(("visit_", "leave_")) and not getattr(getattr(cls, name), "_is_no_op", False)
    )


def visit(node: cst.CSTNode, visitor: cst.CSTVisitor, *, trivia: bool = True) -> None:
    """``node.visit(visitor)`` for a read-only ``CSTVisitor``.

    A visitor that overrides ``on_visit`` sees whitespace, comments and
    punctuation too, unless ``trivia`` is False (for one that only records the
    nodes it is given).
    """
    cls = type(visitor)
    base = cst.CSTVisitor
    if (
        cls.on_visit_attribute is not base.on_visit_attribute
        or cls.on_leave_attribute is not base.on_leave_attribute
        or any(_is_attribute_hook(name) for name in _own_methods(cls))
    ):
        node.visit(visitor)
    elif cls.on_visit is not base.on_visit or cls.on_leave is not base.on_leave:
        _Walker({}, prune=True, every=(visitor.on_visit, visitor.on_leave), trivia=trivia).walk(node)
    else:
        _Walker({name: [getattr(visitor, name)] for name in _own_methods(cls)}, prune=True).walk(node)


def visit_batched(module: cst.Module, visitors: Iterable[cst.BatchableCSTVisitor],
                  metadata: Mapping[type, object]) -> None:
    """``MetadataWrapper(module).visit_batched(visitors)``, with ``metadata`` as
    every visitor's resolved metadata for the walk."""
    visitors = list(visitors)
    table = _callbacks(visitors)
    if any(_is_attribute_hook(name) for name in table):
        from libcst.metadata import MetadataWrapper

        MetadataWrapper(module, unsafe_skip_copy=True).visit_batched(visitors)
        return
    for visitor in visitors:
        visitor.metadata = metadata
    try:
        _Walker(table, prune=False).walk(module)
    finally:
        for visitor in visitors:
            visitor.metadata = {}


def node_classes() -> list[type[cst.CSTNode]]:
    """Every concrete node class libcst exports."""
    return sorted(
        (value for value in vars(cst).values()
         if isinstance(value, type) and issubclass(value, cst.CSTNode) and not inspect.isabstract(value)),
        key=lambda cls: cls.__name__,
    )


def table_source() -> str:
    """The text of ``cst_fields.py`` for the installed libcst."""
    rows = "".join(f"    {cls.__name__!r}: {derive_fields(cls)!r},\n" for cls in node_classes())
    return (
        "# ruff: noqa: E501\n"
        '"""Generated by ``python -m attncheck.static.walk > attncheck/static/cst_fields.py``:\n'
        "the child fields of each libcst node class in visiting order (see walk.py).\n"
        '"""\n\n'
        f"LIBCST_VERSION = {libcst_version!r}\n\n"
        f"FIELDS: dict[str, tuple[str, ...] | None] = {{\n{rows}}}\n"
    )


if __name__ == "__main__":
    print(table_source(), end="")
