"""Recognise the parts of rotary position embeddings (RoPE) in a libcst tree.

RoPE code is written in two layouts, both legitimate:

- ``HALF`` (HF LLaMA, GPT-NeoX): ``rotate_half`` pairs dim i with i + d/2,
  ``x1, x2 = x.chunk(2, -1); cat((-x2, x1), -1)``, and cos/sin are widened
  with ``cat((freqs, freqs), -1)``;
- ``PAIR`` (GPT-J, Meta's real form): ``rotate_every_two`` pairs dims 2i and
  2i + 1, ``stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)``, and cos/sin
  are widened with ``repeat_interleave(2, -1)``.

The rules ATT402-ATT404 judge only what this module recognises; anything it
does not recognise is left alone, so an unusual but correct spelling costs a
missed finding, never a false one. ``rope_index`` is shared through the file's
context, so the rules share the work; it walks the file at most once, and only
when the text holds a word some RoPE pattern needs.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import libcst as cst

from attncheck.plain_search import holds_any
from attncheck.static.facts import FileFacts, FunctionFacts, integer_value, number_value
from attncheck.static.tree import node_fields, subtree, walk

if TYPE_CHECKING:
    from attncheck.static.context import FileContext

HALF = "half"
PAIR = "pair"

# Rotation helpers people import rather than define, with their layout.
_KNOWN_ROTATIONS = {"rotate_half": HALF, "rotate_every_two": PAIR}

_COS = re.compile(r"cos", re.IGNORECASE)
_SIN = re.compile(r"sin", re.IGNORECASE)
# Spellings ``ROPE_WORDS`` matches, searched for first (``plain_search``): its ``\brope`` is no plain word.
_ROPE_SPELLINGS = ("rotary", "rotate")
_FREQ_LIKE = re.compile(r"freq|cos|sin|theta|angle|sinus|phase", re.IGNORECASE)
ROPE_WORDS = re.compile(r"rotary|\brope|rotate", re.IGNORECASE)
_CONCAT = {"torch.cat", "torch.concat", "torch.concatenate"}
_COMPLEX = ("torch.polar", "torch.view_as_complex")


@dataclass(frozen=True)
class Rotation:
    """A ``rotate_half``-like expression: ``cat((-x2, x1))`` or ``stack((-x2, x1), -1)``.

    ``sign`` is +1 for the standard ``(-x2, x1)`` and -1 for ``(x2, -x1)``,
    which rotates the other way.
    """

    node: cst.Call
    layout: str
    sign: int


@dataclass(frozen=True)
class Application:
    """``x * cos + rot(x) * sin`` (sign +1) or ``x * cos - rot(x) * sin`` (sign -1)."""

    node: cst.BinaryOperation
    tensor: cst.BaseExpression
    rotation: Rotation | None  # the rotation used, when it is defined in the file
    layout: str | None
    sign: int  # the sign of the rotation term times the rotation's own sign
    imported: bool = False  # the rotation is a helper imported under a usual name: its layout is assumed


@dataclass(frozen=True)
class Widening:
    """cos/sin (or freqs) widened from d/2 to d columns, in one of the two layouts."""

    node: cst.Call
    layout: str
    # ``cos[..., : cos.shape[-1] // 2].repeat_interleave(2, -1)`` (GLM, Helium, Moonshine): the
    # first half of a half-split cache re-widened interleaved; ``undone`` is that half slice.
    undone: cst.Subscript | None = None


@dataclass(frozen=True)
class FrequencyPower:
    """``base ** (arange(0, d, 2) / d)`` (or ``torch.pow``): the inverse-frequency term."""

    node: cst.BaseExpression
    exponent: cst.BaseExpression
    arange: cst.Call


class RopeIndex:
    """Everything RoPE-shaped in one file, each part found on first use.

    Most files the RoPE rules run on are not RoPE code (ATT403 runs on any file
    that says ``using``), so nothing is computed up front: each part first asks
    the parsed text for a word no match of it can do without (``arange`` for
    the frequency powers, ``cos`` and ``sin`` for ``x * cos + rot(x) * sin``,
    ``cat`` or ``stack`` for a rotation), and only a part whose word is there
    walks the tree, once for all parts (``_Nodes``). A canonical name's last
    part is in the text, in the call itself or in the import that aliases it;
    the code of a node is the text of the node, less block indentation.
    """

    def __init__(self, facts: FileFacts, text: str) -> None:
        self.facts = facts
        self.text = text

    @cached_property
    def _nodes(self) -> _Nodes:
        found = _Nodes(self.facts.module)
        walk.visit(self.facts.module, _Recorder(self.facts, found))  # a fast tree's: a replay of its events
        return found

    def _says(self, *words: str) -> bool:
        return any(word in self.text for word in words)

    @cached_property
    def _says_cos_and_sin(self) -> bool:
        return holds_any(self.text, ("cos",), _COS) and holds_any(self.text, ("sin",), _SIN)

    # -- the parts the rules read ----------------------------------------------

    @cached_property
    def rotations(self) -> dict[str, Rotation]:
        """The rotations functions of the file return, by function name."""
        found: dict[str, Rotation] = {}
        if not self._says("cat", "stack"):
            return found
        nodes = self._nodes
        for fn in self.facts.functions:
            rotated = _returned_rotation(self.facts, nodes.returns.get(id(fn), ()), fn)
            if rotated is None:
                continue
            previous = found.get(fn.name)
            if previous is not None and (previous.layout, previous.sign) != (rotated.layout, rotated.sign):
                found.pop(fn.name)  # two different helpers share a name: judge neither
            else:
                found[fn.name] = rotated
        return found

    @cached_property
    def inline_rotations(self) -> list[Rotation]:
        """Rotations computed in place, not returned by a helper."""
        if not self._says("cat", "stack"):
            return []
        named = {id(r.node) for r in self.rotations.values()}
        found = []
        for fn, call in self._nodes.calls:
            rotated = rotation(self.facts, call, fn)
            if rotated is not None and id(call) not in named:
                found.append(rotated)
        return found

    @cached_property
    def applications(self) -> list[Application]:
        """``x * cos + rot(x) * sin`` and its variants, in source order."""
        if not self._says_cos_and_sin:
            return []
        found = []
        for fn, node in self._nodes.binops:
            applied = _application(self, self.facts, node, fn)
            if applied is not None:
                found.append(applied)
        return found

    @cached_property
    def explicit_form(self) -> bool:
        """``x1 * cos - x2 * sin`` is written out somewhere."""
        if not self._says_cos_and_sin:
            return False
        applied = {id(a.node) for a in self.applications}
        return any(id(node) not in applied and _explicit(self.facts, node) for _, node in self._nodes.binops)

    @cached_property
    def complex_form(self) -> bool:
        """``torch.polar`` / ``view_as_complex`` (Meta) is called somewhere."""
        if not self._says("polar", "view_as_complex"):
            return False
        canonical = self.facts.canonical
        return any(canonical(call.func) in _COMPLEX for _, call in self._nodes.calls)

    @cached_property
    def widenings(self) -> list[Widening]:
        if not self._says("cat", "stack", "repeat_interleave"):
            return []
        found = []
        for fn, call in self._nodes.calls:
            widening = _widening(self.facts, call, fn)
            if widening is not None:
                found.append(widening)
        return found

    @cached_property
    def powers(self) -> list[FrequencyPower]:
        if "arange" not in self.text:
            return []
        found = []
        for _, node in self._nodes.expressions:
            power = _frequency_power(self.facts, node)
            if power is not None:
                found.append(power)
        return found

    @cached_property
    def base_products(self) -> list[cst.BinaryOperation]:
        """``10000 * (arange / d)``."""
        if "arange" not in self.text:
            return []
        return [node for _, node in self._nodes.binops if _base_product(self.facts, node)]

    @cached_property
    def divisors(self) -> set[str]:
        """The code of every right operand of ``/`` (its subscripts taken off)."""
        found = set()
        for _, node in self._nodes.binops:
            if type(node.operator) is cst.Divide:
                divisor = node.right
                while isinstance(divisor, cst.Subscript):  # ``t / inv[None, :]``
                    divisor = divisor.value
                found.add(code(self.facts, divisor))
        return found

    @property
    def calls(self) -> list[tuple[FunctionFacts | None, cst.Call]]:
        """Every call of the file in source order, with the function whose own scope holds it."""
        return self._nodes.calls

    @property
    def subscripts(self) -> list[tuple[FunctionFacts | None, cst.Subscript]]:
        """Every subscript of the file in source order, with its function."""
        return self._nodes.subscripts

    @property
    def uses_rotation_formula(self) -> bool:
        """True when cos/sin multiply the full-width q/k (``q * cos + rot(q) * sin``)."""
        return bool(self.applications) and not self.explicit_form and not self.complex_form

    def layouts(self) -> set[str]:
        """The layouts of the rotations this file applies."""
        found = {a.layout for a in self.applications if a.layout is not None}
        return found or {r.layout for r in self.rotations.values()}

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The parent of a call, binary operation or subscript, or of one of their ancestors."""
        return self._nodes.parent(node)

    def scope(self, node: cst.CSTNode) -> FunctionFacts | None:
        """The function whose own scope holds a call, binary operation or subscript."""
        return self._nodes.scope_of.get(id(node))

    def nodes_in(self, fn: FunctionFacts) -> list[cst.CSTNode]:
        """The calls and binary operations of one function's own scope (its nested functions excluded)."""
        return self._nodes.by_function.get(id(fn), [])

    def is_rope_file(self, text: str) -> bool:
        """The file implements RoPE (so sinusoidal absolute encodings are not judged)."""
        if any(word in text for word in _ROPE_SPELLINGS) or ROPE_WORDS.search(text):
            return True
        return bool(self.applications or self.rotations or self.inline_rotations or self.complex_form)


# -- walking ------------------------------------------------------------------

# Nodes below which no call, binary operation, subscript, return or function
# can be, and whose parent no rule asks for: not walked.
_LEAVES: frozenset[type] = node_fields.TRIVIA | {
    cst.Name, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.Ellipsis,
    cst.Pass, cst.Break, cst.Continue, cst.Import, cst.ImportFrom, cst.Global, cst.Nonlocal,
    type(None), cst.MaybeSentinel,
}


@dataclass
class _Nodes:
    """What one walk of a file records, each list in source order (pre-order) with the
    function whose own scope holds the node, and the parents of nodes, found a top-level
    statement at a time when a node in it is first asked about (few are)."""

    module: cst.Module
    calls: list[tuple[FunctionFacts | None, cst.Call]] = field(default_factory=list)
    binops: list[tuple[FunctionFacts | None, cst.BinaryOperation]] = field(default_factory=list)
    expressions: list[tuple[FunctionFacts | None, cst.CSTNode]] = field(default_factory=list)  # both
    subscripts: list[tuple[FunctionFacts | None, cst.Subscript]] = field(default_factory=list)
    returns: dict[int, list[cst.Return]] = field(default_factory=dict)  # by id of the function
    parents: dict[int, cst.CSTNode | None] = field(default_factory=dict)  # leaves left out
    scope_of: dict[int, FunctionFacts | None] = field(default_factory=dict)  # calls, binops, subscripts
    walked: set[int] = field(default_factory=set)  # the top-level statements ``parents`` covers
    walked_scopes: set[int] = field(default_factory=set)  # the functions whose insides it covers

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        found = self.parents.get(id(node), _UNKNOWN)
        if found is _UNKNOWN:
            # A call or product of a function's own scope has its parent inside that function,
            # often a small part of the top-level class around it: that is walked first.
            scope = self.scope_of.get(id(node))
            if scope is not None and id(scope.node) not in self.walked_scopes:
                self.walked_scopes.add(id(scope.node))
                _record_parents_below(scope.node, self.parents)
                found = self.parents.get(id(node), _UNKNOWN)
        if found is _UNKNOWN:
            for statement in self._statements_holding(node):
                if id(statement) not in self.walked:
                    self.walked.add(id(statement))
                    _record_parents(statement, self.module, self.parents)
            found = self.parents.get(id(node), _UNKNOWN)
        return None if found is _UNKNOWN else found  # type: ignore[return-value]

    def _statements_holding(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        """The top-level statement ``node`` is in, found by its line in a fast tree; every
        statement for a node without a line, or in libcst's tree (none, for one the analyses
        built)."""
        module = self.module
        positions = getattr(module, "positions", None)
        if positions is None:
            return list(module.body)
        if id(node) not in positions.spans:
            return list(module.body) if positions.in_tree(node) else []
        line = positions[node].start.line
        ends = self._statement_ends
        return [module.body[bisect_left(ends, line)]] if ends and line <= ends[-1] else []

    @cached_property
    def _statement_ends(self) -> list[int]:
        """The last line of each top-level statement: a node is in the first that ends at or after
        its line (a decorator comes before its ``def``, which ast gives as the start)."""
        positions = self.module.positions  # type: ignore[attr-defined]
        return [positions[statement].end.line for statement in self.module.body]

    @cached_property
    def by_function(self) -> dict[int, list[cst.CSTNode]]:
        found: dict[int, list[cst.CSTNode]] = {}
        for fn, node in self.expressions:
            found.setdefault(id(fn), []).append(node)
        return found


_UNKNOWN = object()


class _Recorder(cst.CSTVisitor):
    """Fills a ``_Nodes`` with the calls, binary operations, subscripts and returns, each with
    the function whose own scope holds it (its ``def`` line included)."""

    def __init__(self, facts: FileFacts, found: _Nodes) -> None:
        super().__init__()
        self.facts, self.found = facts, found
        self.scopes: list[FunctionFacts | None] = [None]

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scopes.append(self.facts.function(node))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scopes.pop()

    def visit_Call(self, node: cst.Call) -> None:
        self._expression(node, self.found.calls)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        self._expression(node, self.found.binops)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        fn = self.scopes[-1]
        self.found.subscripts.append((fn, node))
        self.found.scope_of[id(node)] = fn

    def visit_Return(self, node: cst.Return) -> None:
        self.found.returns.setdefault(id(self.scopes[-1]), []).append(node)

    def _expression(self, node: cst.CSTNode, kind: list[tuple[FunctionFacts | None, Any]]) -> None:
        fn = self.scopes[-1]
        kind.append((fn, node))
        self.found.expressions.append((fn, node))
        self.found.scope_of[id(node)] = fn


def _record_parents(root: cst.CSTNode, parent: cst.CSTNode, parents: dict[int, cst.CSTNode | None]) -> None:
    """The parent of ``root`` and of every node under it but leaves."""
    parents[id(parent)] = None
    _record(parents, [(root, parent)])


def _record_parents_below(root: cst.CSTNode, parents: dict[int, cst.CSTNode | None]) -> None:
    """The parent of every node under ``root`` but leaves."""
    _record(parents, [(child, root) for child in subtree.children(root) if type(child) not in _LEAVES])


def _record(parents: dict[int, cst.CSTNode | None], stack: list[tuple[cst.CSTNode, cst.CSTNode]]) -> None:
    """The parent of each (node, parent) of ``stack`` and of every node under it but leaves."""
    while stack:
        node, above = stack.pop()
        parents[id(node)] = above
        stack.extend((child, node) for child in subtree.children(node) if type(child) not in _LEAVES)


def code(facts: FileFacts, node: cst.CSTNode) -> str:
    return facts.module.code_for_node(node)


def last_name(node: cst.CSTNode) -> str | None:
    """``rotate_half`` for ``rotate_half``, ``self.rotate_half`` or ``x[:, None].expand``."""
    kind = type(node)  # exact classes: isinstance on libcst's is slow, and this is asked of every call
    if kind is cst.Attribute:
        return node.attr.value
    return node.value if kind is cst.Name else None


def method_call(node: cst.CSTNode, name: str) -> bool:
    """True for ``<anything>.name(...)``."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == name
    )


def is_half_of(facts: FileFacts, node: cst.BaseExpression, fn: FunctionFacts | None) -> bool:
    """``x // 2`` (or ``x / 2``), directly or through one assignment."""
    node = facts.resolve(node, fn)
    return (
        isinstance(node, cst.BinaryOperation)
        and isinstance(node.operator, (cst.FloorDivide, cst.Divide))
        and integer_value(node.right) == 2
    )


# -- rotations ----------------------------------------------------------------


def _split_part(
    facts: FileFacts, expr: cst.BaseExpression, fn: FunctionFacts | None
) -> tuple[str, int, str] | None:
    """(layout, part, base) when ``expr`` is half or one parity of a tensor's last dim."""
    expr = facts.resolve(expr, fn)
    if not isinstance(expr, cst.Subscript) or not expr.slice:
        return None
    last = expr.slice[-1].slice
    if isinstance(last, cst.Slice):
        step = integer_value(last.step) if last.step is not None else None
        base = code(facts, expr.value)
        if step == 2 and last.upper is None:
            start = integer_value(last.lower) if last.lower is not None else 0
            return (PAIR, start, base) if start in (0, 1) else None
        if step is None and last.step is None:
            if last.lower is None and last.upper is not None:
                return HALF, 0, base
            if last.lower is not None and last.upper is None:
                return HALF, 1, base
        return None
    index = integer_value(last.value) if isinstance(last, cst.Index) else None
    if index not in (0, 1) or len(expr.slice) != 1 or not isinstance(expr.value, cst.Call):
        return None
    call = expr.value
    name = last_name(call.func)
    if name in ("chunk", "split", "tensor_split"):
        receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
        if facts.canonical(call.func) in ("torch.chunk", "torch.split") and call.args:
            receiver = call.args[0].value
        return (HALF, index, code(facts, receiver)) if receiver is not None else None
    if name == "unbind" and isinstance(call.func, cst.Attribute):
        return PAIR, index, code(facts, call.func.value)
    return None


def _negated(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        return expr.expression
    return None


def rotation(facts: FileFacts, call: cst.CSTNode, fn: FunctionFacts | None) -> Rotation | None:
    """The Rotation ``call`` computes, if it is ``cat``/``stack`` of a negated swap."""
    found = _swap(facts, call, fn)
    if found is None:
        return None
    layout, sign, joined = found
    return Rotation(call, layout, sign) if layout == joined else None


def crossed_rotation(facts: FileFacts, call: cst.CSTNode, fn: FunctionFacts | None) -> bool:
    """A negated swap whose parts and join disagree: the even and odd dims (``x[..., ::2]``,
    ``x[..., 1::2]``) concatenated as halves (``cat((-x2, x1))``), or the halves stacked as
    pairs. Dim ``2i``'s partner lands at ``i + d/2`` (or the reverse): no cos/sin layout makes
    ``x * cos + rot(x) * sin`` a rotation."""
    found = _swap(facts, call, fn)
    if found is None or found[0] == found[2]:
        return False
    # Only parts sliced out explicitly (``x[..., ::2]``, ``x[..., :h]``) are trusted here: an
    # unflatten and unbind (``x.unflatten(-1, (2, -1)).unbind(-2)``, the halves) reads ambiguously.
    items = call.args[0].value.elements  # type: ignore[attr-defined]
    parts = [_negated(e.value) or e.value for e in items]
    resolved = [facts.resolve(part, fn) for part in parts]
    return all(type(p) is cst.Subscript and type(p.slice[-1].slice) is cst.Slice for p in resolved)


def _swap(facts: FileFacts, call: cst.CSTNode, fn: FunctionFacts | None) -> tuple[str, int, str] | None:
    """``(layout of the parts, sign, layout the join makes)`` for ``cat``/``stack`` of a negated
    swap of two parts of one tensor."""
    if type(call) is not cst.Call or not call.args:  # exact classes: isinstance on libcst's is slow
        return None
    items = call.args[0].value  # tested before the canonical name, which costs more
    if type(items) not in (cst.Tuple, cst.List) or len(items.elements) != 2:
        return None
    func = facts.canonical(call.func)
    if func not in _CONCAT and func != "torch.stack":
        return None
    first, second = (e.value for e in items.elements)
    if (inner := _negated(first)) is not None:
        sign, swapped = 1, (inner, second)  # (-x2, x1)
    elif (inner := _negated(second)) is not None:
        sign, swapped = -1, (first, inner)  # (x2, -x1)
    else:
        return None
    parts = [_split_part(facts, e, fn) for e in swapped]
    if None in parts:
        return None
    (layout_a, part_a, base_a), (layout_b, part_b, base_b) = parts  # type: ignore[misc]
    if layout_a != layout_b or base_a != base_b or (part_a, part_b) != (1, 0):
        return None
    return layout_a, sign, HALF if func in _CONCAT else PAIR


def _returned_rotation(facts: FileFacts, returns: Iterable[cst.Return], fn: FunctionFacts) -> Rotation | None:
    """The rotation one of ``fn``'s own ``return`` statements gives back, if any."""
    for node in returns:
        if node.value is not None:
            value = facts.resolve(node.value, fn)
            seen: set[int] = set()  # ``x = x.view(...)`` resolves back to itself
            while isinstance(value, cst.Call) and last_name(value.func) in ("flatten", "reshape", "view"):
                if not isinstance(value.func, cst.Attribute) or id(value) in seen:
                    break
                seen.add(id(value))
                value = facts.resolve(value.func.value, fn)
            # ``x = x.reshape(..., -1, 2); ...; x = torch.stack((-x2, x1), -1); return x.flatten(-2)``:
            # a name rebound several times returns the rotation when one of its values is one.
            candidates = fn.assignments.get(value.value, []) if isinstance(value, cst.Name) else [value]
            for candidate in candidates:
                found = rotation(facts, candidate, fn)
                if found is not None:
                    return found
    return None


# -- applications and cos/sin layouts -------------------------------------------


def _product(node: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        return node.left, node.right
    return None


def _factor(
    facts: FileFacts, pair: tuple[cst.BaseExpression, cst.BaseExpression], pattern: re.Pattern[str]
) -> cst.BaseExpression | None:
    """The other factor of a product one of whose factors reads like cos (or sin)."""
    left, right = pair
    if pattern.search(code(facts, right)):
        return left
    if pattern.search(code(facts, left)):
        return right
    return None


_CASTS = frozenset({"float", "double", "half", "bfloat16", "to", "type", "type_as", "contiguous"})


def _uncast(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``rotate_half(q)`` for ``rotate_half(q).float()`` and other casts of a call."""
    while (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value in _CASTS
        and isinstance(expr.func.value, cst.Call)
    ):
        expr = expr.func.value
    return expr


def _rotation_term(
    index: RopeIndex, facts: FileFacts, expr: cst.BaseExpression, fn: FunctionFacts | None
) -> tuple[Rotation | None, str | None] | None:
    """(rotation, layout) when ``expr`` is ``rot(x)`` or a name bound to a rotation, cast or
    not (``rotate_half(q).float()``)."""
    expr = _uncast(expr)
    if isinstance(expr, cst.Call):
        name = last_name(expr.func)
        if name in index.rotations:
            found = index.rotations[name]
            return found, found.layout
        if name in _KNOWN_ROTATIONS:
            return None, _KNOWN_ROTATIONS[name]
    found = rotation(facts, facts.resolve(expr, fn), fn)
    return (found, found.layout) if found is not None else None


def _application(
    index: RopeIndex, facts: FileFacts, node: cst.BinaryOperation, fn: FunctionFacts | None
) -> Application | None:
    if not isinstance(node.operator, (cst.Add, cst.Subtract)):
        return None
    left, right = _product(node.left), _product(node.right)
    if left is None or right is None:
        return None
    sides = [(left, right, 1)]
    if isinstance(node.operator, cst.Add):
        sides.append((right, left, 1))
    else:
        sides = [(left, right, -1)]
    for cos_side, sin_side, term_sign in sides:
        tensor = _factor(facts, cos_side, _COS)
        rotated = _factor(facts, sin_side, _SIN)
        if tensor is None or rotated is None:
            continue
        term = _rotation_term(index, facts, rotated, fn)
        if term is None:
            continue
        found, layout = term
        sign = term_sign * (found.sign if found is not None else 1)
        helper = _uncast(rotated)
        imported = found is None and isinstance(helper, cst.Call) and last_name(helper.func) in facts.aliases
        return Application(node, tensor, found, layout, sign, imported)
    return None


def _explicit(facts: FileFacts, node: cst.BinaryOperation) -> bool:
    """``x1 * cos - x2 * sin``: the rotation written out on the halves (or pairs)."""
    if not isinstance(node.operator, cst.Subtract):
        return False
    left, right = _product(node.left), _product(node.right)
    if left is None or right is None:
        return False
    return _factor(facts, left, _COS) is not None and _factor(facts, right, _SIN) is not None


def _widening(facts: FileFacts, call: cst.Call, fn: FunctionFacts | None) -> Widening | None:
    items = call.args[0].value if call.args else None
    pair = isinstance(items, (cst.Tuple, cst.List)) and len(items.elements) == 2
    if not pair and last_name(call.func) != "repeat_interleave":
        return None  # neither spelling: spare the canonical name
    func = facts.canonical(call.func)
    if func in _CONCAT or func == "torch.stack":
        if pair:
            first, second = (code(facts, e.value) for e in items.elements)
            if first == second and _FREQ_LIKE.search(first):
                return Widening(call, HALF if func in _CONCAT else PAIR)
        return None
    if last_name(call.func) != "repeat_interleave":
        return None
    if func == "torch.repeat_interleave":
        args = [a.value for a in call.args if a.keyword is None]
        receiver, count = (args[0], args[1]) if len(args) >= 2 else (None, None)
    elif isinstance(call.func, cst.Attribute) and call.args:
        receiver, count = call.func.value, call.args[0].value
    else:
        return None
    if receiver is None or integer_value(count) != 2:
        return None
    if not _FREQ_LIKE.search(code(facts, receiver)):
        return None
    return Widening(call, PAIR, receiver if first_half(facts, receiver, fn) else None)


def first_half(facts: FileFacts, node: cst.BaseExpression, fn: FunctionFacts | None) -> bool:
    """``x[..., : x.shape[-1] // 2]``: the first half of the last axis."""
    if not isinstance(node, cst.Subscript) or not node.slice:
        return False
    last = node.slice[-1].slice
    return (
        isinstance(last, cst.Slice)
        and last.upper is not None
        and (last.lower is None or integer_value(last.lower) == 0)
        and is_half_of(facts, last.upper, fn)
    )


def is_base(facts: FileFacts, node: cst.BaseExpression) -> bool:
    """A RoPE base: a literal of at least 100 (10000, 1e4, 500000) or a name like ``base``/``theta``."""
    if isinstance(node, (cst.Integer, cst.Float)):
        return number_value(node) >= 100
    name = last_name(node) or ""
    return "base" in name.lower() or "theta" in name.lower()


def first_call(node: cst.CSTNode, facts: FileFacts, canonical: str) -> cst.Call | None:
    """The first call to ``canonical`` inside ``node`` (``node`` included), depth first."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Call) and facts.canonical(current.func) == canonical:
            return current
        stack.extend(reversed(node_fields.children(current)))
    return None


def _frequency_power(facts: FileFacts, node: cst.CSTNode) -> FrequencyPower | None:
    kind = type(node)  # exact classes, as in last_name
    if kind is cst.BinaryOperation and type(node.operator) is cst.Power:
        base, exponent = node.left, node.right
    elif kind is cst.Call and len(node.args) == 2 and facts.canonical(node.func) == "torch.pow":
        base, exponent = node.args[0].value, node.args[1].value
    else:
        return None
    arange = first_call(exponent, facts, "torch.arange")
    if arange is None or not is_base(facts, base):
        return None
    return FrequencyPower(node, exponent, arange)


def _base_product(facts: FileFacts, node: cst.CSTNode) -> bool:
    """``10000 * (arange(0, d, 2) / d)``: the base multiplied in instead of raised."""
    if not (type(node) is cst.BinaryOperation and type(node.operator) is cst.Multiply):
        return False
    for base, other in ((node.left, node.right), (node.right, node.left)):
        if is_base(facts, base) and first_call(other, facts, "torch.arange") is not None:
            return True
    return False


# -- the index ----------------------------------------------------------------


def rope_index(context: FileContext) -> RopeIndex:
    """The RoPE index of a file, built once and shared by the rules that read it."""
    return context.shared(_index_of_context)


def _index_of_context(context: FileContext) -> RopeIndex:
    parsed = context.reduced.text if context.reduced is not None else context.source.text
    return build_rope_index(context.facts, parsed)


def build_rope_index(facts: FileFacts, text: str | None = None) -> RopeIndex:
    """The RoPE index of the module ``facts`` index; ``text`` is the text it was parsed from
    (generated from the module when not given)."""
    return RopeIndex(facts, facts.module.code if text is None else text)
