"""Light data flow over one file: what each name and ``self.`` attribute holds.

Rules ask questions like "what is ``self.scale``?" or "where does ``S`` come
from?" far from where the value was written. ``FileFacts`` answers them by
indexing, once per file, every simple assignment in each function and every
``self.attr = ...`` in each class, plus the file's import aliases. It is
deliberately shallow: one assignment is followed, several are reported as
ambiguous, and nothing is evaluated.

Node classes are tested exactly (``type(node) is cst.Name``) here and in the
analyses built on this index: libcst's classes are ABCs, and an ``isinstance``
on one that fails runs ``ABCMeta``'s Python-level check.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterator
from dataclasses import InitVar, dataclass, field
from functools import cached_property

import libcst as cst

from attncheck.static.tree import subtree, walk
from attncheck.static.tree.construct import new

# Module aliases people import attention code with, mapped to the canonical
# module, so that ``F.softmax``, ``nn.functional.softmax`` and
# ``torch.nn.functional.softmax`` are recognised as one function.
_DEFAULT_ALIASES = {
    "torch": "torch",
    "nn": "torch.nn",
    "F": "torch.nn.functional",
    "math": "math",
    "np": "numpy",
}


def dotted_name(node: cst.CSTNode) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, None for anything else."""
    kind = type(node)  # not isinstance: on libcst's classes that is a Python-level ABC check
    if kind is cst.Name:
        return node.value
    if kind is cst.Attribute:
        base = dotted_name(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


# The longest integer literal read exactly (characters, underscores and prefix included): far
# beyond any size, dim or constant in attention code, and far below what makes ``int()`` slow
# or refuse (4,300 digits). A longer one reads as infinite (``number_value``) or unknown.
MAX_INTEGER_CHARS = 320


def integer_value(node: cst.CSTNode | None, bound: int | None = None) -> int | None:
    """The integer a literal spells the way Python reads it (``7``, ``0x1f``, ``-0b1``, ``1_000``),
    through any unary minus or plus; None for anything else, for a literal longer than
    ``MAX_INTEGER_CHARS``, and for one whose magnitude is ``bound`` or more."""
    sign = 1
    while type(node) is cst.UnaryOperation and type(node.operator) in (cst.Minus, cst.Plus):
        sign = -sign if type(node.operator) is cst.Minus else sign
        node = node.expression
    if type(node) is not cst.Integer or len(node.value) > MAX_INTEGER_CHARS:
        return None
    value = int(node.value, 0)
    if bound is not None and value >= bound:
        return None
    return sign * value


def number_value(node: cst.Integer | cst.Float) -> float:
    """The value of a number literal, read as Python reads it (any base, underscores), without
    ``evaluated_value`` (which runs ``ast`` at every read): an integer too long to read, or
    beyond the range of a float, is ``inf``."""
    if type(node) is not cst.Integer:
        return float(node.value)
    value = integer_value(node)
    if value is None:
        return math.inf
    try:
        return float(value)
    except OverflowError:
        return math.inf


def whole_number(value: float | None) -> int | None:
    """``value`` as an int when it is a finite whole number (a dim, a diagonal), else None:
    ``number_value`` and the arithmetic over it can give ``inf``, ``nan`` or ``2.5``."""
    if value is None or not math.isfinite(value) or value != int(value):
        return None
    return int(value)


def self_attribute(node: cst.CSTNode) -> str | None:
    """``"attr"`` for ``self.attr``, None otherwise."""
    if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "self":
        return node.attr.value
    return None


@dataclass
class FunctionFacts:
    """Assignments inside one function (nested functions are indexed on their own)."""

    node: cst.FunctionDef
    owner_class: InitVar[ClassFacts | None]
    params: tuple[str, ...]
    assignments: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)
    calls: list[cst.Call] = field(default_factory=list)

    def __post_init__(self, owner_class: ClassFacts | None) -> None:
        # Weak, as a back reference should be: the class lists its methods, and the cycle would
        # keep the class's whole subtree alive until Python's collector ran, which lint workers
        # pause. ``FileFacts.every_class`` keeps each class alive as long as the facts.
        self._owner = None if owner_class is None else weakref.ref(owner_class)

    @property
    def owner(self) -> ClassFacts | None:
        """The class this function is a method of; None for a plain or nested function."""
        return None if self._owner is None else self._owner()

    @property
    def name(self) -> str:
        return self.node.name.value

    @cached_property
    def preorder(self) -> subtree.Preorder:
        """The function's nodes, listed by one walk for every analysis that reads them."""
        return subtree.Preorder(self.node)


@dataclass
class ClassFacts:
    """A class: its bases, methods, and what its ``self.`` attributes are assigned."""

    node: cst.ClassDef
    bases: tuple[str, ...]
    methods: dict[str, FunctionFacts] = field(default_factory=dict)
    attributes: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)
    # ``self.register_buffer("bias", value)`` makes ``self.bias`` hold ``value``.
    buffers: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.node.name.value

    def constructed_as(self, attr: str, facts: FileFacts) -> str | None:
        """Canonical callee of ``self.attr = Callee(...)``, e.g. ``torch.nn.Linear``."""
        values = self.attributes.get(attr, [])
        if len(values) == 1 and type(values[0]) is cst.Call:
            return facts.canonical(values[0].func)
        return None


class FileFacts:
    """The per-file index rules query; built once, lazily, by the engine."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.aliases: dict[str, str] = dict(_DEFAULT_ALIASES)
        self.classes: dict[str, ClassFacts] = {}  # top-level classes, the first of each name
        self.every_class: list[ClassFacts] = []  # nested and shadowed ones too
        self.functions: list[FunctionFacts] = []
        self._by_node: dict[int, FunctionFacts] = {}
        # canonical() by id, each with its node: held, a node's id cannot be reused meanwhile.
        self._canonical: dict[int, tuple[cst.CSTNode, str | None]] = {}
        walk.visit(module, _Indexer(self))

    # -- lookups -------------------------------------------------------------

    def function(self, node: cst.FunctionDef) -> FunctionFacts | None:
        return self._by_node.get(id(node))

    def canonical(self, node: cst.CSTNode) -> str | None:
        """The dotted name of ``node`` with its import alias expanded. Every rule asks it of
        every call's callee, so each answer is kept; the index asks it of class bases while
        the imports are still being read, before any is kept (see ``_Indexer``)."""
        found = self._canonical.get(id(node))
        if found is None:
            found = self._canonical[id(node)] = (node, self._expanded(node))
        return found[1]

    def _expanded(self, node: cst.CSTNode) -> str | None:
        name = dotted_name(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        module = self.aliases.get(head)
        if module is None:
            return name
        return f"{module}.{rest}" if rest else module

    def resolve(
        self, expr: cst.BaseExpression, fn: FunctionFacts | None, depth: int = 6
    ) -> cst.BaseExpression:
        """Follow a Name or ``self.attr`` to the one value assigned to it.

        Stops (returning the last expression reached) at parameters, at names
        assigned more than once, and after ``depth`` steps.
        """
        for _ in range(depth):
            nxt = self._assigned_value(expr, fn)
            if nxt is None:
                return expr
            expr = nxt
        return expr

    def _assigned_value(
        self, expr: cst.BaseExpression, fn: FunctionFacts | None
    ) -> cst.BaseExpression | None:
        if type(expr) is cst.Name and fn is not None:
            values = fn.assignments.get(expr.value, [])
            return values[0] if len(values) == 1 else None
        attr = self_attribute(expr)
        if attr is not None and fn is not None and fn.owner is not None:
            values = fn.owner.attributes.get(attr, [])
            return values[0] if len(values) == 1 else None
        return None

    def iter_functions(self) -> Iterator[FunctionFacts]:
        return iter(self.functions)


class _Indexer(cst.CSTVisitor):
    """One walk that fills a FileFacts."""

    def __init__(self, facts: FileFacts) -> None:
        self.facts = facts
        self.class_stack: list[ClassFacts] = []
        self.function_stack: list[FunctionFacts] = []

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted_name(alias.name)
            if full is None:
                continue
            if alias.asname is not None and type(alias.asname.name) is cst.Name:
                self.facts.aliases[alias.asname.name.value] = full
            else:
                head = full.split(".")[0]
                self.facts.aliases[head] = head

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.module is None or type(node.names) is cst.ImportStar:
            return
        module = dotted_name(node.module)
        if module is None:
            return
        for alias in node.names:
            name = dotted_name(alias.name)
            if name is None:
                continue
            local = name
            if alias.asname is not None and type(alias.asname.name) is cst.Name:
                local = alias.asname.name.value
            self.facts.aliases[local] = f"{module}.{name}"

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        # Not canonical(): the imports below this class are not read yet, so the answer is not kept.
        bases = tuple(filter(None, (self.facts._expanded(arg.value) for arg in node.bases)))
        facts = ClassFacts(node=node, bases=bases)
        self.facts.every_class.append(facts)
        if not self.class_stack and not self.function_stack:
            self.facts.classes.setdefault(facts.name, facts)
        self.class_stack.append(facts)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.class_stack.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        # A method is a function defined directly in a class body.
        owner = None
        if self.class_stack and (
            not self.function_stack or self.function_stack[-1].owner is not self.class_stack[-1]
        ):
            owner = self.class_stack[-1]
        params = tuple(p.name.value for p in _all_params(node.params))
        facts = FunctionFacts(node=node, owner_class=owner, params=params)
        if owner is not None:
            owner.methods.setdefault(facts.name, facts)
        self.facts.functions.append(facts)
        self.facts._by_node[id(node)] = facts
        self.function_stack.append(facts)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.function_stack.pop()

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Call(self, node: cst.Call) -> None:
        if self.function_stack:
            self.function_stack[-1].calls.append(node)
            func = node.func  # most calls are told apart here, without a call
            if type(func) is cst.Attribute and func.attr.value == "register_buffer":
                self._record_buffer(node, func)

    def _record_buffer(self, node: cst.Call, func: cst.Attribute) -> None:
        owner = self.function_stack[-1].owner
        if owner is None or self_attribute(func) is None or len(node.args) < 2:
            return
        name = node.args[0].value
        if type(name) is cst.SimpleString:
            owner.buffers.setdefault(name.evaluated_value, []).append(node.args[1].value)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._bind(node.target, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        # ``x *= s`` makes x's value no longer the one assigned: record it so
        # that resolve() sees two assignments and stops there.
        self._bind(node.target, augmented_value(node))

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if not self.function_stack:
            return
        fn, kind = self.function_stack[-1], type(target)  # exact classes: isinstance on libcst's is slow
        if kind is cst.Name:
            fn.assignments.setdefault(target.value, []).append(value)
        elif kind is cst.Tuple or kind is cst.List:
            elements = [e.value for e in target.elements]
            if type(value) in (cst.Tuple, cst.List) and len(value.elements) == len(elements):
                for element, item in zip(elements, value.elements, strict=True):
                    self._bind(element, item.value)
                return
            # ``b, s, d = x.shape`` binds s to ``x.shape[1]``.
            for index, element in enumerate(elements):
                if type(element) is cst.Name:
                    fn.assignments.setdefault(element.value, []).append(element_of(value, index))
        elif kind is cst.Attribute:
            attr = self_attribute(target)
            if attr is not None and fn.owner is not None:
                fn.owner.attributes.setdefault(attr, []).append(value)


def element_of(value: cst.BaseExpression, index: int) -> cst.BaseExpression:
    """``value[index]``: what a name bound by unpacking holds, as an expression."""
    integer = new[cst.Integer](value=str(index))
    return new[cst.Subscript](value=value, slice=[new[cst.SubscriptElement](slice=new[cst.Index](value=integer))])


def augmented_value(node: cst.AugAssign) -> cst.BinaryOperation:
    """``x + s``: the value ``x += s`` gives ``x``, as an expression."""
    operator = new[getattr(cst, type(node.operator).__name__.replace("Assign", ""))]()
    return new[cst.BinaryOperation](left=node.target, operator=operator, right=node.value)


def _all_params(params: cst.Parameters) -> Iterator[cst.Param]:
    yield from params.posonly_params
    yield from params.params
    if type(params.star_arg) is cst.Param:
        yield params.star_arg
    yield from params.kwonly_params
    if params.star_kwarg is not None:
        yield params.star_kwarg
