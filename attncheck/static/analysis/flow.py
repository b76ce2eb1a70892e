"""What a name can hold here: the per-file index of assignments, the values a use can see,
and which code is unreachable from which.

Part of the analyses behind ``semantics.Semantics`` (see its docstring); it never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import libcst as cst

from attncheck.static.analysis.syntax import positional, short_code, string_value
from attncheck.static.facts import FileFacts, FunctionFacts, self_attribute
from attncheck.static.tree import subtree

# -- per-file index of what facts.py does not record ----------------------------


class _AttributeReferences:
    """The ``self.attr`` reads of each class's methods, as ``get((id(klass), attr))`` gives
    them: (the innermost function, the Attribute), in source order. Every node of a class's
    methods is read for them, so a class is read only once a rule asks about it. The reads
    in ``__init__``, which sets the attributes up, are left out: every reader of them asks
    about the uses outside it (``Semantics.references_outside_init``), and ``__init__`` is
    often the longest method of a class."""

    def __init__(self, facts: FileFacts) -> None:
        self.methods: dict[int, list[FunctionFacts]] = {}  # by class, in source order
        for fn in facts.functions:
            owner = fn.owner
            if owner is not None and fn.name != "__init__":
                self.methods.setdefault(id(owner), []).append(fn)
        self.found: dict[tuple[int, str], list[tuple[FunctionFacts, cst.Attribute]]] = {}
        self.walked: set[int] = set()

    def get(
        self, key: tuple[int, str], default: list[tuple[FunctionFacts, cst.Attribute]] | None = None
    ) -> list[tuple[FunctionFacts, cst.Attribute]] | None:
        if key[0] not in self.walked:
            self.walked.add(key[0])
            for method in self.methods.get(key[0], ()):
                self._collect(key[0], method)
        return self.found.get(key, default)

    def _collect(self, klass: int, method: FunctionFacts) -> None:
        """The reads in ``method`` whose innermost function it is: its nodes less the nested
        functions (a method of a nested class is one) and lambdas, which own theirs."""
        nodes, found = method.preorder.nodes, self.found
        nested = sorted((start, end) for start, node, end in method.preorder.marked
                        if start and type(node) in _FUNCTIONS)
        at = 0
        for start, end in [*nested, (len(nodes), len(nodes))]:
            if start < at:
                continue  # inside a nested function already left out
            for node in nodes[at:start]:
                if type(node) is cst.Attribute:
                    attr = self_attribute(node)
                    if attr is not None:
                        found.setdefault((klass, attr), []).append((method, node))  # type: ignore[arg-type]
            at = end


_FUNCTIONS = frozenset({cst.FunctionDef, cst.Lambda})


class _Index:
    """Facts the rules need beyond facts.py: unpack arity, attribute writers, buffers, bare
    calls, returns (from the statements alone), and the reads of ``self.`` attributes."""

    def __init__(self, facts: FileFacts) -> None:
        self.unpacks: dict[tuple[int, str], tuple[cst.BaseExpression, int, int | None]] = {}
        # The names an unpacking binds, by position (None for a starred or nested target), by
        # the id of the value unpacked: ``b, c, t = x.shape`` says which axis is which.
        self.unpack_names: dict[int, tuple[str | None, ...]] = {}
        self.attr_writer: dict[int, FunctionFacts] = {}
        self.buffers: dict[tuple[int, str], list[cst.BaseExpression]] = {}
        self.bare_calls: set[int] = set()
        self.attr_refs = _AttributeReferences(facts)
        self.returns: dict[int, list[cst.Return]] = {}


# The node classes whose children may be statements: a walk for statements enters no other.
_STATEMENT_HOLDERS = subtree.concrete(
    cst.BaseSuite, cst.SimpleStatementLine, cst.BaseCompoundStatement, cst.Else,
    cst.ExceptHandler, cst.ExceptStarHandler, cst.Finally, cst.MatchCase,
)


class _IndexBuilder:
    """Fills an ``_Index``. Returns, bare calls and assignments are statements, so one walk
    of the statements finds them, with the functions around each on ``stack``, without
    entering any expression; the ``register_buffer`` calls are among facts.py's calls of
    each method."""

    def __init__(self, facts: FileFacts, index: _Index) -> None:
        self.facts = facts
        self.index = index
        self.stack: list[FunctionFacts] = []

    def build(self, module: cst.Module) -> None:
        handlers: dict[type, Callable[[Any], None]] = {
            cst.Return: self.visit_Return,
            cst.Expr: self.visit_Expr,
            cst.Assign: self.visit_Assign,
            cst.AnnAssign: self.visit_AnnAssign,
        }
        pending: list[cst.CSTNode | None] = list(reversed(module.body))  # None: leave a function
        readers = subtree.READERS
        while pending:
            node = pending.pop()
            if node is None:
                self.stack.pop()
                continue
            kind = type(node)
            handler = handlers.get(kind)
            if handler is not None:
                handler(node)
            elif kind is cst.FunctionDef:
                fn = self.facts.function(node)  # type: ignore[arg-type]
                if fn is not None:
                    self.stack.append(fn)
                    self.index.returns.setdefault(id(fn), [])
                    pending.append(None)
                pending.append(node.body)  # type: ignore[union-attr]
            elif kind in _STATEMENT_HOLDERS:
                found = readers[kind](node)  # type: ignore[arg-type]
                found.reverse()
                pending.extend(found)
        for fn in self.facts.functions:
            if fn.owner is not None:
                for call in fn.calls:
                    # ``method_name(call) == "register_buffer"``, read inline: most calls are not
                    if type(call.func) is cst.Attribute and call.func.attr.value == "register_buffer":
                        self._buffer(fn, call)

    def visit_Return(self, node: cst.Return) -> None:
        if self.stack:
            self.index.returns[id(self.stack[-1])].append(node)

    def visit_Expr(self, node: cst.Expr) -> None:
        if type(node.value) is cst.Call:  # exact: isinstance on libcst's classes is slow
            self.index.bare_calls.add(id(node.value))
            self.index.bare_calls.add(id(node.value.func))

    def visit_Assign(self, node: cst.Assign) -> None:
        if not self.stack:
            return
        fn = self.stack[-1]
        for target in node.targets:
            if type(target.target) is not cst.Name:
                self._record(fn, target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if self.stack and node.value is not None and type(node.target) is not cst.Name:
            self._record(self.stack[-1], node.target, node.value)

    def _record(self, fn: FunctionFacts, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        """What an unpacking or a ``self.x`` target records (a plain name records nothing)."""
        if type(target) in (cst.Tuple, cst.List) and type(value) not in (cst.Tuple, cst.List):
            self.index.unpack_names[id(value)] = tuple(
                element.value.value if type(element.value) is cst.Name else None for element in target.elements
            )
            # ``b, t, d, *_ = x.shape``: the rank is unknown, and so is every position after the star
            starred = any(type(element) is cst.StarredElement for element in target.elements)
            for position, element in enumerate(target.elements):
                if type(element) is cst.StarredElement:
                    break
                if type(element.value) is cst.Name:
                    self.index.unpacks[(id(fn), element.value.value)] = (
                        value,
                        position,
                        None if starred else len(target.elements),
                    )
        if type(target) is cst.Attribute and self_attribute(target) is not None:
            self.index.attr_writer[id(value)] = fn

    def _buffer(self, fn: FunctionFacts, call: cst.Call) -> None:
        """``self.register_buffer("name", value)`` in a method: ``self.name`` holds ``value``."""
        args = positional(call)
        if len(args) >= 2 and string_value(args[0]) is not None:
            key = (id(fn.owner), string_value(args[0]) or "")
            self.index.buffers.setdefault(key, []).append(args[1])
            self.index.attr_writer[id(args[1])] = fn


# -- the analysis ---------------------------------------------------------------


class _Layout:
    """Where each node of a function sits: its source order, as ``where[id(node)]`` (pre-order;
    trivia, which no analysis asks about, left out), and the arms of the ``if`` statements and
    the loops, as ranges of that order, which the few queries read rather than a walk giving
    each node the ifs and loops around it. Read from the function's ``preorder``, shared by
    every query about it."""

    def __init__(self, preorder: subtree.Preorder) -> None:
        self.where = where = preorder.where
        # (start of the body, start of the else, end) of each ``if`` with an else (with none,
        # no two nodes are in different arms), and (the loop, its end) of each loop.
        self.choices: list[tuple[int, int, int]] = []
        self.loops: list[tuple[int, int]] = []
        for start, node, end in preorder.marked:
            kind = type(node)
            if kind is cst.For or kind is cst.While:
                self.loops.append((start, end))
            elif kind is cst.If and node.orelse is not None:  # type: ignore[attr-defined]
                self.choices.append((where[id(node.body)], where[id(node.orelse)], end))  # type: ignore[attr-defined]

    def position(self, node: cst.CSTNode, default: int) -> int:
        return self.where.get(id(node), default)

    def apart(self, one: int, other: int) -> bool:
        """Whether the nodes at ``one`` and ``other`` are in different arms of an ``if``: both
        in its arms, one before its else and one not."""
        for body, orelse, end in self.choices:
            if body <= one < end and body <= other < end and (one < orelse) != (other < orelse):
                return True
        return False

    def looped(self, one: int, other: int) -> bool:
        """Whether a loop holds the nodes at ``one`` and ``other`` (not as the loop itself)."""
        return any(loop < one < end and loop < other < end for loop, end in self.loops)


def reaching(expr: cst.BaseExpression, fn: FunctionFacts | None) -> list[cst.CSTNode]:
    """Every node of ``expr`` and of every value assigned in ``fn`` to a name it reads, transitively
    (flow-insensitive: all values of a name at once): what ``expr`` can be computed from."""
    found: list[cst.CSTNode] = []
    pending, seen = [expr], set()
    while pending:
        for node in subtree.preorder(pending.pop()):
            found.append(node)
            if type(node) is cst.Name and fn is not None and node.value not in seen:
                seen.add(node.value)
                pending.extend(fn.assignments.get(node.value, []))
    return found


def _written(node: cst.CSTNode) -> cst.CSTNode:
    """The parsed node standing for ``node``: facts.py writes ``x /= s`` as a new ``x / s``
    around the parsed target and ``a, b = t`` as a new ``t[0]`` around the parsed value."""
    while type(node) in (cst.BinaryOperation, cst.Subscript):
        inner = node.left if type(node) is cst.BinaryOperation else node.value
        if inner is node:
            break
        node = inner
    return node


class FlowQueries:
    """The data-flow questions; holds the module, its facts and the per-file index."""

    module: cst.Module
    facts: FileFacts
    index: _Index

    def code(self, node: cst.CSTNode) -> str:
        return short_code(self.module, node)

    # -- tracing ---------------------------------------------------------------

    def values(
        self, expr: cst.BaseExpression, fn: FunctionFacts | None
    ) -> list[tuple[cst.BaseExpression, FunctionFacts | None]]:
        """Every value a Name or ``self.attr`` was assigned, with the function that wrote it,
        less the values that cannot reach this read of the name (``unreachable``)."""
        if type(expr) is cst.Name and fn is not None:  # exact: isinstance on libcst's classes is slow
            key = (id(expr), id(fn))
            found = self._values.get(key)
            if found is None:
                found = [(v, fn) for v in fn.assignments.get(expr.value, []) if not self.unreachable(v, expr, fn)]
                self._values[key] = found
            return list(found)
        attr = self_attribute(expr)
        owner = fn.owner if fn is not None else None
        if attr is not None and owner is not None:
            found = list(owner.attributes.get(attr, [])) + self.index.buffers.get((id(owner), attr), [])
            return [(v, self.index.attr_writer.get(id(v), fn)) for v in found]
        return []

    def single(
        self, expr: cst.BaseExpression, fn: FunctionFacts | None
    ) -> tuple[cst.BaseExpression, FunctionFacts | None] | None:
        found = self.values(expr, fn)
        return found[0] if len(found) == 1 else None

    def is_param(self, expr: cst.BaseExpression, fn: FunctionFacts | None) -> bool:
        return type(expr) is cst.Name and fn is not None and expr.value in fn.params

    def _layout(self, fn: FunctionFacts) -> _Layout:
        found = self._orders.get(id(fn))
        if found is None:
            found = self._orders[id(fn)] = _Layout(fn.preorder)
        return found

    def unreachable(self, value: cst.CSTNode, read: cst.CSTNode, fn: FunctionFacts) -> bool:
        """A ``value`` assigned in ``fn`` can never be what ``read`` sees: it is written in the
        other arm of an ``if`` (falcon's ALiBi and RoPE branches both rebind
        ``attention_scores``), or later with no loop around both (SAM's ``q = q * self.scale``
        after ``attn_bias`` was computed from ``q``). Nodes facts.py built (``x /= s`` as
        ``x / s``, ``a, b = t`` as ``t[0]``) stand for their first parsed part."""
        layout = self._layout(fn)
        written, seen_at = layout.where.get(id(_written(value))), layout.where.get(id(read))
        if written is None or seen_at is None:
            return False
        return layout.apart(written, seen_at) or (written > seen_at and not layout.looped(written, seen_at))
