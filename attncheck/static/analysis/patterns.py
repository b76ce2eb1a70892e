"""Recognisers for the pieces of attention code that several rules talk about.

Rules ask "is this a softmax, and of what?", "is this a masked_fill, with which
mask and value?", "does this view split heads before the sequence?", "what did
this name hold at this line?". The answers live here, once, so that every rule
recognises the same spellings (``F.softmax``/``torch.softmax``/``x.softmax``,
``masked_fill``/``torch.where``, ``view``/``reshape``, ``@``/``matmul``/``bmm``/
``einsum``). Everything is syntactic: nothing is evaluated and torch is never
imported. Node classes are tested exactly (``type(node) is cst.Call``), as in
``facts``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Literal

import libcst as cst

from attncheck.static.analysis.results import Softmax
from attncheck.static.analysis.syntax import (
    _PRODUCT_NAMES,
    _PRODUCTS,
    _SOFTMAX,
    keyword,
    positional,
    short_code,
    string_value,
)
from attncheck.static.facts import (
    FileFacts,
    FunctionFacts,
    augmented_value,
    dotted_name,
    element_of,
    integer_value,
    number_value,
    self_attribute,
)
from attncheck.static.tree import subtree

if TYPE_CHECKING:
    from attncheck.static.context import FileContext

FLOAT16_MIN = -65504.0

# -- small syntactic helpers ----------------------------------------------------


def method_name(node: cst.BaseExpression) -> str | None:
    """``"view"`` for ``x.view(...)``; None for anything that is not a method call."""
    if type(node) is cst.Call and type(node.func) is cst.Attribute:
        return node.func.attr.value
    return None


def other_method(callee: cst.BaseExpression, name: str) -> bool:
    """Whether ``callee`` is a method other than ``name`` of anything but ``self`` (``x.view``,
    ``F.linear``): the commonest callee, told apart cheaply. No alias expansion changes the
    last name of a dotted callee, so its canonical name does not end in ``name`` either."""
    return type(callee) is cst.Attribute and callee.attr.value != name and (
        type(callee.value) is not cst.Name or callee.value.value != "self"
    )


def receiver(node: cst.Call) -> cst.BaseExpression:
    """``x`` of ``x.method(...)`` (callers check ``method_name`` first)."""
    assert type(node.func) is cst.Attribute
    return node.func.value


def argument(node: cst.Call, index: int, keyword: str | None = None) -> cst.BaseExpression | None:
    """The positional argument ``index`` or the keyword argument ``keyword``."""
    positional = [a for a in node.args if a.keyword is None and not a.star]
    if keyword is not None:
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == keyword:
                return arg.value
    return positional[index].value if index < len(positional) else None


def base_name(node: cst.BaseExpression) -> str | None:
    """The last name of ``a.b.c`` (``c``), or of ``x`` itself."""
    name = dotted_name(node)
    return name.rsplit(".", 1)[-1] if name else None


# -- numbers --------------------------------------------------------------------

_INF_NAMES = {"math.inf", "torch.inf", "numpy.inf", "float.inf"}


def literal_value(node: cst.BaseExpression, facts: FileFacts) -> float | None:
    """The number a literal spells: ``-1e9``, ``float('-inf')``, ``-math.inf``, ``1e-9``."""
    if type(node) in (cst.Integer, cst.Float):
        return number_value(node)
    if type(node) is cst.UnaryOperation and type(node.operator) in (cst.Minus, cst.Plus):
        inner = literal_value(node.expression, facts)
        if inner is None:
            return None
        return -inner if type(node.operator) is cst.Minus else inner
    if facts.canonical(node) in _INF_NAMES:
        return math.inf
    if type(node) is cst.Call and dotted_name(node.func) == "float" and len(node.args) == 1:
        text = node.args[0].value
        if type(text) is cst.SimpleString:
            try:
                return float(str(text.evaluated_value))
            except ValueError:
                return None
    return None


def is_dtype_min(node: cst.BaseExpression, facts: FileFacts) -> bool:
    """``torch.finfo(x.dtype).min`` (or ``-torch.finfo(...).max``): the safe fill value."""
    if type(node) is cst.UnaryOperation and type(node.operator) is cst.Minus:
        inner = node.expression
        return (
            type(inner) is cst.Attribute and inner.attr.value == "max" and _is_finfo(inner.value, facts)
        )
    return type(node) is cst.Attribute and node.attr.value == "min" and _is_finfo(node.value, facts)


def _is_finfo(node: cst.BaseExpression, facts: FileFacts) -> bool:
    return type(node) is cst.Call and (facts.canonical(node.func) or "").endswith("finfo")


# -- local data flow ------------------------------------------------------------


class LocalFlow:
    """Straight-line data flow in one function: what a name held at one of its uses.

    ``FileFacts.resolve`` stops at names assigned twice (``w = softmax(w)``);
    attention code reassigns the same name at every step, so rules that follow
    a tensor through a forward pass need the assignment *before* a given use.
    Branches are read in source order, which is what the rules want: in
    ``if mask is not None: s = s.masked_fill(...)`` the masked ``s`` is the one
    the softmax below sees.
    """

    def __init__(self, preorder: subtree.Preorder) -> None:
        """The flow of the function ``preorder`` lists: its nodes in source order, less the
        function's own header and the nested scopes (``outside``), and each write to a name,
        at the index of the last node of its assignment statement: it is seen by the nodes
        after it, once its right-hand side was read."""
        function = preorder.nodes[0]
        self.where = where = preorder.where
        self.body = where[id(function.body)]  # type: ignore[attr-defined]
        self.outside = [(start, end) for start, node, end in preorder.marked if type(node) in _SCOPES and start]
        self.writes: dict[str, list[tuple[int, cst.BaseExpression | _Written]]] = {}
        for start, node, end in preorder.marked:  # assignments do not nest: in source order
            if type(node) in _ASSIGNMENTS and self._index(start) is not None:
                self._assigned(node, end - 1)

    def _index(self, at: int | None) -> int | None:
        """``at``, where it is an index of the flow."""
        if at is None or at < self.body:
            return None
        for start, end in self.outside:
            if start <= at < end:
                return None
        return at

    def _assigned(self, node: cst.CSTNode, at: int) -> None:
        """Record the writes of an assignment statement, ``at`` its last node."""
        if type(node) is cst.Assign:
            for target in node.targets:
                self._write(target.target, node.value, at)
        elif type(node) is cst.AnnAssign:
            if node.value is not None:
                self._write(node.target, node.value, at)
        elif type(node) is cst.AugAssign:
            self._write(node.target, _Written(node), at)

    def _write(self, target: cst.BaseExpression, value: cst.BaseExpression | _Written, at: int) -> None:
        if type(target) is cst.Name:
            self.writes.setdefault(target.value, []).append((at, value))
        elif type(target) in (cst.Tuple, cst.List):
            for index, element in enumerate(target.elements):
                if type(element.value) is cst.Name:
                    self.writes.setdefault(element.value.value, []).append((at, _Written(value, index)))

    def position(self, node: cst.CSTNode) -> int | None:
        """Where ``node`` is in the flow's source order; None for a node outside the flow."""
        return self._index(self.where.get(id(node)))

    def contains(self, node: cst.CSTNode) -> bool:
        return self.position(node) is not None

    def value_at(self, name: cst.Name) -> cst.BaseExpression | None:
        """The value last assigned to ``name`` before this use of it, if any."""
        position = self.position(name)
        if position is None:
            return None
        for at, value in reversed(self.writes.get(name.value, ())):  # written in source order
            if at < position:
                return value.expression() if isinstance(value, _Written) else value
        return None

    def is_after(self, later: cst.CSTNode, earlier: cst.CSTNode) -> bool:
        found, before = self.position(later), self.position(earlier)
        return (-1 if found is None else found) > (-1 if before is None else before)


class _Written:
    """The value a write gave a name, where no parsed node is that value: ``x += s`` wrote
    ``x + s``, ``a, b = t`` wrote ``t[0]`` to ``a``. Built once, when first read: most writes
    never are."""

    def __init__(self, source: cst.AugAssign | cst.BaseExpression | _Written, index: int | None = None) -> None:
        self.source = source
        self.index = index
        self.built: cst.BaseExpression | None = None

    def expression(self) -> cst.BaseExpression:
        if self.built is None:
            source = self.source
            if type(source) is cst.AugAssign:
                self.built = augmented_value(source)
            else:
                value = source.expression() if isinstance(source, _Written) else source
                self.built = element_of(value, self.index)
        return self.built


# Exact classes: ``isinstance`` on libcst's abstract node classes is several times slower.
_SCOPES = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda})
_ASSIGNMENTS = frozenset({cst.Assign, cst.AnnAssign, cst.AugAssign})


# The node classes that hold statements, other than the scopes a LocalFlow does not enter.
_STATEMENT_HOLDERS = subtree.concrete(
    cst.BaseSuite, cst.SimpleStatementLine, cst.BaseCompoundStatement, cst.Else,
    cst.ExceptHandler, cst.ExceptStarHandler, cst.Finally, cst.MatchCase,
) - _SCOPES


def _assigned_values(function: cst.FunctionDef) -> Iterator[cst.BaseExpression]:
    """The right-hand sides of the assignment statements of ``function`` (and the items of a
    tuple or list assigned), outside nested scopes: nodes that its LocalFlow holds, found
    without walking into any expression."""
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        node = stack.pop()
        if type(node) in (cst.Assign, cst.AnnAssign) and node.value is not None:
            values = [node.value]
            while values:
                value = values.pop()
                if type(value) not in _SCOPES:  # a lambda is not in the flow, only its parts
                    yield value
                if type(value) in (cst.Tuple, cst.List):
                    values.extend(e.value for e in value.elements)
        elif type(node) in _STATEMENT_HOLDERS:
            stack.extend(subtree.children(node))


# Calls that hand back their receiver's values unchanged, as far as the layout
# and the mask semantics of a tensor go.
TRANSPARENT_METHODS = frozenset(
    {
        "contiguous",
        "float",
        "half",
        "double",
        "bfloat16",
        "to",
        "type_as",
        "type",
        "clone",
        "detach",
        "cuda",
        "cpu",
    }
)


_MASK_KEYWORD = re.compile(r"^(attn_mask|attention_mask|mask|attn_bias|attention_bias)$")


class Tracer:
    """Follows an expression back through local names and ``self.`` attributes.

    One Tracer per file, shared by the rules through ``tracer(context)``; it
    caches one LocalFlow per function.
    """

    def __init__(self, facts: FileFacts) -> None:
        self.facts = facts
        self._flows: dict[int, LocalFlow] = {}
        self._assigned: dict[int, dict[int, FunctionFacts]] = {}  # per class: see _method_holding

    def flow(self, fn: FunctionFacts) -> LocalFlow:
        found = self._flows.get(id(fn.node))
        if found is None:
            found = self._flows[id(fn.node)] = LocalFlow(fn.preorder)
        return found

    def step(
        self, node: cst.BaseExpression, fn: FunctionFacts | None
    ) -> tuple[cst.BaseExpression, FunctionFacts | None] | None:
        """One assignment back: the value ``node`` (a name or ``self.x``) was given."""
        if type(node) is cst.Name and fn is not None:  # exact: isinstance on libcst's classes is slow
            value = self.flow(fn).value_at(node)
            return (value, fn) if value is not None else None
        attr = self_attribute(node)
        if attr is not None and fn is not None and fn.owner is not None:
            values = fn.owner.attributes.get(attr) or fn.owner.buffers.get(attr) or []
            if len(values) == 1:
                return values[0], self._method_holding(values[0], fn)
        return None

    def _method_holding(self, node: cst.CSTNode, fn: FunctionFacts) -> FunctionFacts | None:
        """The method whose flow holds ``node`` (an attribute's value). A parsed node is in one
        method at most, so the right-hand sides of the methods' assignment statements, found
        without walking any expression, answer for ``self.x = ...``; the flows of every method
        answer for the rest (``register_buffer`` arguments)."""
        owner = fn.owner
        if owner is None:
            return None
        assigned = self._assigned.get(id(owner))
        if assigned is None:
            assigned = self._assigned[id(owner)] = {
                id(value): method for method in owner.methods.values() for value in _assigned_values(method.node)
            }
        found = assigned.get(id(node))
        if found is not None:
            return found
        return next((m for m in owner.methods.values() if self.flow(m).contains(node)), None)

    def origin(
        self,
        node: cst.BaseExpression,
        fn: FunctionFacts | None,
        through: frozenset[str] = TRANSPARENT_METHODS,
        depth: int = 12,
    ) -> tuple[cst.BaseExpression, FunctionFacts | None]:
        """Follow names, ``self.`` attributes and the ``through`` methods back to a source."""
        for _ in range(depth):
            if method_name(node) in through and type(node) is cst.Call:
                node = receiver(node)
                continue
            if self.is_dropout(node, fn) and type(node) is cst.Call and node.args:
                node = node.args[0].value
                continue
            stepped = self.step(node, fn)
            if stepped is None:
                return node, fn
            node, fn = stepped
        return node, fn

    def reads(
        self, expr: cst.BaseExpression, goal: cst.CSTNode, fn: FunctionFacts, depth: int = 0
    ) -> bool:
        """Whether ``goal`` (a call or a name written in place) is in the lineage of ``expr`` in ``fn``.

        Walks names back to the value they held at that use, and into operands,
        subscripts, method receivers and call arguments.
        """
        if expr is goal:
            return True
        if depth > 16:
            return False
        if type(expr) is cst.Name:
            if type(goal) is cst.Name and expr.value == goal.value and self.flow(fn).is_after(expr, goal):
                return True
            value = self.flow(fn).value_at(expr)
            return value is not None and self.reads(value, goal, fn, depth + 1)
        if type(expr) is cst.BinaryOperation:
            return self.reads(expr.left, goal, fn, depth + 1) or self.reads(expr.right, goal, fn, depth + 1)
        if type(expr) in (cst.Subscript, cst.UnaryOperation):
            inner = expr.value if type(expr) is cst.Subscript else expr.expression
            return self.reads(inner, goal, fn, depth + 1)
        if type(expr) is cst.Call:
            parts = [a.value for a in expr.args]
            if type(expr.func) is cst.Attribute and self_attribute(expr.func) is None:
                parts.insert(0, expr.func.value)
            return any(self.reads(part, goal, fn, depth + 1) for part in parts)
        return False

    def feeds_attention(self, fill: FillSite, fn: FunctionFacts | None) -> bool:
        """Whether the values ``fill`` wrote are attention scores or an attention mask here: a
        softmax in ``fn`` is taken of them, or a call gets them as its mask (``attn_mask=``,
        ``attention_mask=``). Masked logits that go to ``topk``, a sigmoid or a loss are not."""
        if fn is None:
            return False
        goal: cst.CSTNode = fill.call
        if fill.in_place and type(fill.target) is cst.Name:
            goal = fill.target
        for call in fn.calls:
            taken = softmax_call(call, self.facts, fn)
            if taken is not None and self.reads(taken.input, goal, fn):
                return True
            masks = [a.value for a in call.args if a.keyword is not None and _MASK_KEYWORD.search(a.keyword.value)]
            if any(self.reads(mask, goal, fn) for mask in masks):
                return True
        return False

    def is_dropout(self, node: cst.BaseExpression, fn: FunctionFacts | None) -> bool:
        """``F.dropout(x)``, ``self.dropout(x)`` where ``self.dropout = nn.Dropout(...)``."""
        if type(node) is not cst.Call:
            return False
        if (self.facts.canonical(node.func) or "").endswith(".dropout"):
            return True
        attr = self_attribute(node.func)
        if attr is None or fn is None or fn.owner is None:
            return False
        built = fn.owner.constructed_as(attr, self.facts) or ""
        return built.endswith("Dropout") or (built == "" and "drop" in attr.lower())


# -- softmax, matmul, transposes ------------------------------------------------


def tracer(context: FileContext) -> Tracer:
    """The Tracer of a file, shared by every rule that follows values back."""
    return context.shared(_new_tracer)


def _new_tracer(context: FileContext) -> Tracer:
    return Tracer(context.facts)


# Callees named after a library function (``np.matmul(a, b)``, ``scipy.special.softmax(x)``) whose
# receiver is a module, not the tensor a method would be called on.
_LIBRARIES = ("torch.", "numpy.", "scipy.")


def softmax_call(node: cst.BaseExpression, facts: FileFacts, fn: FunctionFacts | None) -> Softmax | None:
    """The softmax ``node`` takes, for every common spelling, else None: the one recogniser the
    rules and ``Semantics.softmax`` (which memoises it) share.

    ``F.softmax(s, dim=-1)``, ``torch.softmax(input=s, dim=-1)``, ``s.softmax(-1)``,
    ``nn.Softmax(dim=-1)(s)`` and ``self.softmax(s)`` where ``self.softmax = nn.Softmax(dim=-1)``
    (its dim read from the module's construction). ``self.softmax(s)`` is never read as a softmax
    of ``self``, nor ``scipy.special.softmax(x)`` as one of ``scipy.special``.
    """
    if type(node) is not cst.Call:
        return None
    callee = node.func
    if other_method(callee, "softmax"):
        return None
    func = facts.canonical(callee) or ""
    if type(callee) is cst.Name and func not in _SOFTMAX:
        return None
    # The ``spelled`` functions capture the module, not the facts or a Semantics: a Softmax is
    # memoised there, and a cycle would keep the whole tree alive until Python's collector runs
    # (which lint workers pause).
    module = facts.module
    args = positional(node)
    if func in _SOFTMAX:
        scores = args[0] if args else keyword(node, "input")
        dim = args[1] if len(args) > 1 else keyword(node, "dim")
        if scores is None:
            return None
        return Softmax(node, scores, dim, dim is not None, lambda: short_code(module, callee))
    if method_name(node) == "softmax" and not func.startswith(_LIBRARIES) and self_attribute(callee) is None:
        scores = receiver(node)
        dim = args[0] if args else keyword(node, "dim")
        return Softmax(node, scores, dim, dim is not None, lambda: f"{short_code(module, scores)}.softmax")
    built = _softmax_module(callee, facts, fn)
    if built is None or not args:
        return None
    built_args = positional(built)
    dim = built_args[0] if built_args else keyword(built, "dim")
    return Softmax(node, args[0], dim, dim is not None, lambda: short_code(module, built), built)


def _softmax_module(callee: cst.BaseExpression, facts: FileFacts, fn: FunctionFacts | None) -> cst.Call | None:
    """The ``nn.Softmax(...)`` call ``callee`` is: inline, or assigned to the ``self.`` attribute it names."""
    if type(callee) is cst.Call:
        candidates: Sequence[cst.BaseExpression] = [callee]
    else:
        attr = self_attribute(callee)
        if attr is None or fn is None or fn.owner is None:
            return None
        candidates = fn.owner.attributes.get(attr, [])
    return next(
        (v for v in candidates if type(v) is cst.Call and facts.canonical(v.func) == "torch.nn.Softmax"), None
    )


def product_operands(node: cst.CSTNode, facts: FileFacts) -> list[cst.BaseExpression] | None:
    """The two factors of a product like q·kᵀ, else None: the one recogniser the rules and the
    ``Semantics`` pipelines share.

    ``a @ b``, ``torch.matmul(a, b)``, ``torch.bmm(a, b)``, ``a.matmul(b)``, ``a.bmm(b)``,
    ``torch.baddbmm(c, a, b)``, and an einsum (or ``opt_einsum.contract``) with a literal spec,
    its operands given one by one or as one list (``torch.einsum(spec, [q, k])``, Persson's).
    ``np.matmul(a, b)`` is not read as a method of ``np``.
    """
    kind = type(node)
    if kind is cst.BinaryOperation and type(node.operator) is cst.MatrixMultiply:
        return [node.left, node.right]
    if kind is not cst.Call or (type(node.func) is cst.Attribute and node.func.attr.value not in _PRODUCT_NAMES):
        return None  # no alias expansion changes a dotted callee's last name
    func = facts.canonical(node.func) or ""
    args = positional(node)
    if func in _PRODUCTS or func.endswith(".einsum"):
        if "einsum" in func or func.endswith("contract"):
            if len(args) == 2 and type(args[1]) in (cst.List, cst.Tuple) and string_value(args[0]) is not None:
                listed = [element.value for element in args[1].elements]  # torch.einsum(spec, [a, b])
                return listed if len(listed) == 2 else None
            return args[1:3] if len(args) >= 3 and string_value(args[0]) is not None else None
        if func.endswith("baddbmm"):
            return args[1:3] if len(args) >= 3 else None
        return args[:2] if len(args) >= 2 else None
    if method_name(node) in ("matmul", "bmm") and len(args) == 1 and not func.startswith(_LIBRARIES):
        return [receiver(node), args[0]]
    return None


def einsum_output(node: cst.BaseExpression, facts: FileFacts) -> str | None:
    """The output subscripts of ``torch.einsum("bhqk,bhkd->bhqd", ...)`` (spaces removed)."""
    if type(node) is not cst.Call or facts.canonical(node.func) not in ("torch.einsum", "einops.einsum"):
        return None
    spec = next((a.value for a in node.args if type(a.value) is cst.SimpleString), None)
    if spec is None:
        return None
    text = str(spec.evaluated_value).replace(" ", "")
    return text.split("->", 1)[1] if "->" in text else None


_TRANSPOSE_METHODS = {"transpose", "permute", "swapaxes", "swapdims", "movedim", "t"}
_TRANSPOSE_ATTRS = {"T", "mT", "H", "mH"}


def is_transposed(node: cst.BaseExpression, facts: FileFacts) -> bool:
    """A tensor whose strides a transpose reordered: ``x.transpose(1, 2)``, ``x.permute(...)``,
    ``x.mT``, ``x.T``, ``torch.transpose(x, 1, 2)``."""
    if type(node) is cst.Attribute and node.attr.value in _TRANSPOSE_ATTRS:
        return True
    if type(node) is not cst.Call:
        return False
    canonical = facts.canonical(node.func) or ""
    if canonical in ("torch.transpose", "torch.permute", "torch.swapaxes", "torch.movedim"):
        return True
    return method_name(node) in _TRANSPOSE_METHODS and not canonical.startswith("torch.")


# -- shapes ---------------------------------------------------------------------

DimRole = Literal["batch", "seq", "heads", "head_dim", "model", "rest"]

_HEADS = re.compile(
    r"^(h|nh|heads?|n_?heads?|num_?heads?|nheads?|head_?num|num_attention_heads|"
    r"num_(?:query|q|kv|key_value)_heads|n_(?:q|kv)_heads?|n_?head)$",
    re.IGNORECASE,
)
_HEAD_DIM = re.compile(
    r"^(d_?k|d_?v|d_?h|dh|hd|hs|d_?head|head_?dim|head_?size|dim_?head|"
    r"attention_head_size|d_?qkv|kv_?dim|e_?h)$",
    re.IGNORECASE,
)
_SEQ = re.compile(
    r"^(s|t|l|n|seq|seq_?len(gth)?(_[qk])?|[qk]_?len|(tgt|src|kv|key|query)_?len(gth)?|"
    r"num_tokens|tokens|length|len_[qk]|seq_?len_?(q|k|kv))$",
    re.IGNORECASE,
)
_BATCH = re.compile(r"^(b|bs|bsz|batch|batch_?size|nb|n_?batch)$", re.IGNORECASE)
_MODEL = re.compile(
    r"^(c|d|e|d_?model|embed_?dim|hidden_?(size|dim)|n_?embd|dim|emb_?dim|model_?dim)$", re.IGNORECASE
)


def dim_role(node: cst.BaseExpression) -> DimRole | None:
    """What a size argument of ``view``/``reshape`` names, judged by its spelling.

    ``self.num_heads`` -> heads, ``E // H`` / ``C // self.n_head`` -> head_dim,
    ``seq_len`` / ``T`` / ``S`` -> seq, ``-1`` -> rest. ``N`` reads as seq only
    when nothing else says batch; callers look at positions too.
    """
    if type(node) is cst.UnaryOperation and literal_is(node, -1):
        return "rest"
    if (
        type(node) is cst.BinaryOperation
        and type(node.operator) is cst.FloorDivide
        and dim_role(node.right) == "heads"
    ):
        return "head_dim"
    name = base_name(node)
    return None if name is None else _named_role(name)


@cache
def _named_role(name: str) -> DimRole | None:
    """The role a size's name spells (kept per name: every view's sizes are read by several
    rules, and the same names recur)."""
    for role, pattern in (
        ("heads", _HEADS),
        ("head_dim", _HEAD_DIM),
        ("batch", _BATCH),
        ("seq", _SEQ),
        ("model", _MODEL),
    ):
        if pattern.match(name):
            return role  # type: ignore[return-value]
    return None


def literal_is(node: cst.BaseExpression, number: int) -> bool:
    return integer_value(node) == number


def shape_arguments(node: cst.Call) -> Sequence[cst.BaseExpression] | None:
    """The sizes of ``x.view(a, b, c)`` or ``x.reshape((a, b, c))``; None for ``*shape``."""
    if any(arg.star or arg.keyword is not None for arg in node.args):
        return None
    values = [arg.value for arg in node.args]
    if len(values) == 1 and type(values[0]) in (cst.Tuple, cst.List):
        elements = values[0].elements
        if any(type(e) is cst.StarredElement for e in elements):
            return None
        return [e.value for e in elements]
    return values


def mentions_heads(node: cst.BaseExpression) -> bool:
    """True when a heads-like name occurs anywhere in ``node`` (``b * self.num_heads``)."""
    return any(type(n) is cst.Name and _HEADS.match(n.value) for n in subtree.preorder(node))


# -- masks ------------------------------------------------------------------------


@dataclass(frozen=True)
class FillSite:
    """A place where masked positions of a tensor get a fill value.

    ``mask_blocks`` says whether the positions the mask selects are the ones that
    receive ``value`` (``masked_fill(m, v)``, ``where(m, v, x)``) or the ones
    that keep ``target`` (``where(m, x, v)``).
    """

    call: cst.Call
    target: cst.BaseExpression | None
    mask: cst.BaseExpression
    value: cst.BaseExpression
    mask_blocks: bool
    in_place: bool = False


# The last names of the callees fill_site reads (most calls of a file are none of them).
_FILL_CALLEES = frozenset({"masked_fill", "masked_fill_", "where"})


def fill_site(node: cst.Call, facts: FileFacts) -> FillSite | None:
    """``s.masked_fill(m, v)``, ``s.masked_fill_(m, v)``, ``torch.masked_fill(s, m, v)``,
    and ``torch.where(m, s, v)`` / ``torch.where(m, v, s)`` where v is a constant."""
    if type(node.func) is cst.Attribute and node.func.attr.value not in _FILL_CALLEES:
        return None  # the last name of a dotted callee survives alias expansion: no fill
    canonical = facts.canonical(node.func) or ""
    if canonical == "torch.masked_fill" and len(node.args) >= 3:
        return FillSite(node, node.args[0].value, node.args[1].value, node.args[2].value, True)
    name = method_name(node)
    if name in ("masked_fill", "masked_fill_") and not canonical.startswith("torch."):
        mask, value = argument(node, 0, "mask"), argument(node, 1, "value")
        if mask is not None and value is not None:
            return FillSite(node, receiver(node), mask, value, True, in_place=name == "masked_fill_")
    if canonical == "torch.where" and len(node.args) == 3:
        condition, chosen, other = (a.value for a in node.args)
        if _is_constant(chosen, facts) and not _is_constant(other, facts):
            return FillSite(node, other, condition, chosen, True)
        if _is_constant(other, facts) and not _is_constant(chosen, facts):
            return FillSite(node, chosen, condition, other, False)
    return None


def _is_constant(node: cst.BaseExpression, facts: FileFacts) -> bool:
    if literal_value(node, facts) is not None or is_dtype_min(node, facts):
        return True
    # ``torch.tensor(float('-inf'))`` and ``torch.full_like(s, -1e9)`` hold one constant.
    if type(node) is cst.Call and (facts.canonical(node.func) or "") in (
        "torch.tensor",
        "torch.full_like",
    ):
        index = 1 if (facts.canonical(node.func) or "").endswith("full_like") else 0
        value = argument(node, index)
        return value is not None and literal_value(value, facts) is not None
    return False


def constant_value(node: cst.BaseExpression, facts: FileFacts) -> float | None:
    """Like ``literal_value`` but also reads ``torch.tensor(c)`` and ``torch.full_like(s, c)``."""
    value = literal_value(node, facts)
    if value is not None or type(node) is not cst.Call:
        return value
    canonical = facts.canonical(node.func) or ""
    index = 1 if canonical.endswith("full_like") else 0
    if canonical in ("torch.tensor", "torch.full_like"):
        inner = argument(node, index)
        return literal_value(inner, facts) if inner is not None else None
    return None


def is_query_row_mask(mask: cst.BaseExpression) -> bool:
    """A mask broadcast along the key axis: it zeroes whole query rows and removes no key from
    any row. ``m[:, :, None, None]`` and ``m.unsqueeze(-1)`` pick padded queries; a reduction
    over the keys picks the fully masked ones (``selects_fully_masked_rows``)."""
    if type(mask) is cst.UnaryOperation and type(mask.operator) in (cst.BitInvert, cst.Not):
        mask = mask.expression
    if type(mask) is cst.Subscript:
        last = mask.slice[-1].slice
        return type(last) is cst.Index and type(last.value) is cst.Name and last.value.value == "None"
    if method_name(mask) == "unsqueeze":
        return len(mask.args) == 1 and literal_is(mask.args[0].value, -1)  # type: ignore[attr-defined]
    return selects_fully_masked_rows(mask)


def selects_fully_masked_rows(mask: cst.BaseExpression) -> bool:
    """``~m.any(-1, keepdim=True)``, ``m.all(dim=-1, keepdim=True)``, ``m.any(-1, keepdim=True).logical_not()``:
    a mask reduced over the key axis, which selects whole query rows. Zeroing those rows after
    the softmax is the legitimate guard against fully masked queries (their weights would be NaN)."""
    if type(mask) is cst.UnaryOperation and type(mask.operator) in (cst.BitInvert, cst.Not):
        mask = mask.expression
    if type(mask) is not cst.Call or type(mask.func) is not cst.Attribute:
        return False
    name = mask.func.attr.value
    if name == "logical_not":
        return selects_fully_masked_rows(mask.func.value)
    if name not in ("any", "all"):
        return False
    axis, kept = argument(mask, 0, "dim"), argument(mask, 1, "keepdim")
    return axis is not None and literal_is(axis, -1) and kept is not None and _is_name(kept, "True")


def is_blocking_value(node: cst.BaseExpression, facts: FileFacts) -> bool:
    """A fill value meant to remove a key from the softmax: -inf, finfo.min, -1e4, -1e9..."""
    if is_dtype_min(node, facts):
        return True
    value = constant_value(node, facts)
    return value is not None and value <= -100.0


Polarity = Literal["ones", "zeros"]

_COMPARISONS_ZERO = (cst.Equal,)
_COMPARISONS_NONZERO = (cst.NotEqual, cst.GreaterThan)


def selected_polarity(node: cst.BaseExpression) -> tuple[cst.BaseExpression, Polarity] | None:
    """Which entries of the underlying mask a mask expression selects.

    ``mask == 0``, ``~mask``, ``mask.logical_not()``, ``mask.eq(0)`` select the
    zeros; ``mask``, ``mask.bool()``, ``mask == 1``, ``mask != 0``, ``mask > 0``
    select the ones. Returns the underlying mask expression and the polarity.
    """
    flipped = False
    for _ in range(8):
        if type(node) is cst.UnaryOperation and type(node.operator) in (cst.BitInvert, cst.Not):
            node, flipped = node.expression, not flipped
            continue
        if type(node) is cst.Comparison and len(node.comparisons) == 1:
            target = node.comparisons[0]
            right = target.comparator
            if type(target.operator) in _COMPARISONS_ZERO and (
                literal_is(right, 0) or _is_name(right, "False")
            ):
                node, flipped = node.left, not flipped
                continue
            if type(target.operator) is cst.Equal and (literal_is(right, 1) or _is_name(right, "True")):
                node = node.left
                continue
            if type(target.operator) in _COMPARISONS_NONZERO and literal_is(right, 0):
                node = node.left
                continue
            return None
        name = method_name(node)
        if type(node) is cst.Call and name in ("logical_not", "eq", "ne", *_MASK_SHAPING):
            if name == "logical_not":
                flipped = not flipped
            elif name in ("eq", "ne"):
                if not node.args or not (
                    literal_is(node.args[0].value, 0) or literal_is(node.args[0].value, 1)
                ):
                    return None
                zero = literal_is(node.args[0].value, 0)
                flipped ^= (name == "eq") == zero
            node = receiver(node)
            continue
        if type(node) is cst.Subscript:
            node = node.value
            continue
        break
    if type(node) in (cst.Name, cst.Attribute, cst.Call):
        return node, "zeros" if flipped else "ones"
    return None


_MASK_SHAPING = frozenset(
    {
        "bool",
        "to",
        "unsqueeze",
        "view",
        "reshape",
        "expand",
        "expand_as",
        "contiguous",
        "byte",
        "long",
        "int",
        "float",
        "type",
        "type_as",
        "cuda",
        "detach",
        "squeeze",
        "repeat",
        "flip",
    }
)


def _is_name(node: cst.BaseExpression, value: str) -> bool:
    return type(node) is cst.Name and node.value == value


def is_mask_shaping(node: cst.BaseExpression) -> bool:
    """``mask.unsqueeze(1)``, ``mask.bool()``, ``mask[:, None]``: same entries, other shape."""
    return (type(node) is cst.Call and method_name(node) in _MASK_SHAPING) or type(node) is cst.Subscript


# -- naming ---------------------------------------------------------------------

_SCORE_NAME = re.compile(r"(score|logit|att|sim|dots|energ|qk|weight|prob|^w$|^e$|^a$)", re.IGNORECASE)


def looks_like_scores(node: cst.BaseExpression, facts: FileFacts) -> bool:
    """Named like attention scores (``scores``, ``attn``, ``att_logits``, ``dots``...)
    or a q·kᵀ product spelled inline."""
    if product_operands(node, facts) is not None or einsum_output(node, facts) is not None:
        return True
    name = base_name(node)
    return bool(name and _SCORE_NAME.search(name))


# -- head tensors -----------------------------------------------------------------

_SPLITTERS = frozenset({"chunk", "split", "unbind", "tensor_split"})


def is_model_input(node: cst.BaseExpression, tracer: Tracer, fn: FunctionFacts | None) -> bool:
    """A ``(batch, seq, features)`` tensor: a parameter, a submodule's output
    (``self.q_proj(x)``), ``F.linear(...)``, a sum of those, or a chunk of one."""
    for _ in range(6):
        node, fn = tracer.origin(node, fn)
        if type(node) is cst.Subscript and method_name(node.value) in _SPLITTERS:
            node = receiver(node.value)  # type: ignore[arg-type]
        elif type(node) is cst.Call and method_name(node) in _SPLITTERS:
            node = receiver(node)
        else:
            break
    if type(node) is cst.Name:
        return fn is not None and node.value in fn.params
    if type(node) is cst.BinaryOperation and type(node.operator) is cst.Add:
        return is_model_input(node.left, tracer, fn) or is_model_input(node.right, tracer, fn)
    if type(node) is cst.Call:
        return self_attribute(node.func) is not None or (tracer.facts.canonical(node.func) or "").endswith(
            "functional.linear"
        )
    return False


_SDPA = "torch.nn.functional.scaled_dot_product_attention"


def is_heads_first_product(node: cst.BaseExpression, tracer: Tracer, fn: FunctionFacts | None) -> bool:
    """The ``(batch, heads, seq, head_dim)`` output of attention: ``weights @ v``,
    ``torch.matmul(softmax(...), v)``, a ``'...->bhqd'`` einsum, or SDPA."""
    facts = tracer.facts
    if type(node) is cst.Call and facts.canonical(node.func) == _SDPA:
        return True
    output = einsum_output(node, facts)
    if output is not None:
        return len(output) == 4 and output[1] == "h"
    operands = product_operands(node, facts)
    if operands is None or is_transposed(operands[1], facts):
        return False
    weights, _ = tracer.origin(operands[0], fn)
    if softmax_call(weights, facts, fn) is not None:
        return True
    name = base_name(weights)
    return bool(name and _SCORE_NAME.search(name))
