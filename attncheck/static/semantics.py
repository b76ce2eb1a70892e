"""What attention code means, for the rules that judge it.

Rules ask semantic questions the syntax alone cannot answer: is this product
q·kᵀ? does this name hold the head dim or the sequence length? is this a
softmax, and over which dim? which ``self.`` attributes are Linear or Dropout
modules, and does forward ever use them? This module answers them once per
file, on top of the light data flow of ``facts``; it never imports torch.

The flow is deliberately flow-insensitive: a name assigned several times
stands for all its values at once, so a rule sees every way a tensor can be
built and stays quiet when any of them is legitimate.

Node classes are tested exactly (``type(node) is cst.Call``), as in ``facts``.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

import libcst as cst

from attncheck.static import subtree
from attncheck.static.facts import (
    ClassFacts,
    FileFacts,
    FunctionFacts,
    dotted_name,
    number_value,
    self_attribute,
    whole_number,
)
from attncheck.static.patterns import method_name, other_method

if TYPE_CHECKING:
    from attncheck.static.engine import FileContext

# -- names people give to attention quantities ---------------------------------

_NAME_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "head_dim",
        re.compile(
            r"(d_?k|d_?head|head_?dim|dim_?head|head_?size|attention_head_size|size_per_head|dim_per_head"
            r"|per_head_dim|d_?kv|qk_head_dim|head_dim_qk|hd|d_qk|depth|key_size|kv_channels)",
            re.I,
        ),
    ),
    (
        "num_heads",
        re.compile(
            r"(num_?heads?|n_?heads?|heads|nheads?|num_attention_heads|head_?num|num_query_heads"
            r"|num_q_heads|n_q_heads)",
            re.I,
        ),
    ),
    (
        "seq_len",
        re.compile(
            r"(seq_?len(gth)?|sequence_length|n_?tokens|num_tokens|tgt_len|src_len|q_len|kv_len|k_len"
            r"|key_len|query_len|kv_seq_len|q_seq_len|seq_len_[qk]|len_[qkv]|max_seq_len|block_size"
            r"|context_length|n_ctx)",
            re.I,
        ),
    ),
    (
        "d_model",
        re.compile(
            r"(d_?model|embed_?dim|n_?embd|n_?embed|hidden_?size|hidden_?dim|dim|model_?dim|d_?embed"
            r"|emb_?dim|embedding_?dim|embed_?size|emb_?size|width|n_?state|all_head_size|inner_dim)",
            re.I,
        ),
    ),
    ("batch", re.compile(r"(batch_?size|bsz|bs)", re.I)),
)
# Single capital letters are read case-sensitively: S is a length, s may be anything.
_LETTERS = {
    "S": "seq_len",
    "T": "seq_len",
    "L": "seq_len",
    "C": "d_model",
    "E": "d_model",
    "D": "d_model",
    "H": "num_heads",
    "h": "num_heads",
    "B": "batch",
}

DESCRIPTION = {
    "head_dim": "the head dimension",
    "num_heads": "the number of heads",
    "seq_len": "the sequence length",
    "d_model": "the model width (d_model)",
    "batch": "the batch size",
}

_SCALE_NAME = re.compile(
    r"(scale|scaling|temperature|norm_factor|sm_scale|softmax_scale|multiplier|inv_sqrt|rsqrt)", re.I
)
_MASK_NAME = re.compile(r"mask|tril|triu|causal", re.I)
_ATTENTION_CALL = re.compile(r"attention|attn", re.I)
_HEAD_COUNT = re.compile(r"(?:^|[._])(?:num_?|n_?)?heads?(?:$|_)|num_heads|n_head", re.I)

_SOFTMAX = {"torch.softmax", "torch.nn.functional.softmax", "torch.special.softmax"}
SDPA = {"torch.nn.functional.scaled_dot_product_attention", "scaled_dot_product_attention"}
_PRODUCTS = {"torch.matmul", "torch.bmm", "torch.einsum", "torch.baddbmm", "einsum", "opt_einsum.contract"}
# The last names of the callees product_operands reads: the functions and the methods.
_PRODUCT_NAMES = frozenset({name.rsplit(".", 1)[-1] for name in _PRODUCTS} | {"matmul", "bmm"})
_SHAPE_KEEPING = {
    "transpose",
    "contiguous",
    "float",
    "half",
    "bfloat16",
    "double",
    "to",
    "type",
    "type_as",
    "masked_fill",
    "masked_fill_",
    "clone",
    "detach",
    "mul",
    "div",
    "divide",
    "multiply",
    "mul_",
    "div_",
    "add",
    "add_",
    "sub",
    "clamp",
    "softmax",
    "view_as",
    "expand_as",
    "repeat_interleave",
    "expand",
    "narrow",
    "swapaxes",
    "mT",
}
_DROPOUT_KINDS = ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout")
_NOT_PROJECTIONS = re.compile(
    r"(Dropout|Norm|Softmax|GELU|ReLU|SiLU|Tanh|Sigmoid|Mish|ELU|Rotary|RoPE|Embedding)", re.I
)


@cache
def name_quantity(name: str) -> str | None:
    """The quantity a bare name stands for by convention (``d_k`` is the head dim). Kept per
    name: ``has_heads`` asks it of every name of a class, and the same names recur."""
    if name in _LETTERS:
        return _LETTERS[name]
    for kind, pattern in _NAME_PATTERNS:
        if pattern.fullmatch(name):
            return kind
    return None


def number(expr: cst.BaseExpression) -> float | None:
    """The value of a numeric literal expression (``-0.5``, ``1 / 2``), else None."""
    if type(expr) in (cst.Integer, cst.Float):
        return number_value(expr)
    if type(expr) is cst.UnaryOperation and type(expr.operator) in (cst.Minus, cst.Plus):
        inner = number(expr.expression)
        if inner is None:
            return None
        return -inner if type(expr.operator) is cst.Minus else inner
    if type(expr) is cst.BinaryOperation:
        left, right = number(expr.left), number(expr.right)
        if left is None or right is None:
            return None
        op = expr.operator
        if type(op) is cst.Add:
            return left + right
        if type(op) is cst.Subtract:
            return left - right
        if type(op) is cst.Multiply:
            return left * right
        if type(op) is cst.Divide and right:
            return left / right
    return None


def is_infinite(expr: cst.BaseExpression, facts: FileFacts) -> bool:
    """``float('inf')``, ``math.inf``, ``torch.inf``, ``np.inf`` (either sign)."""
    if type(expr) is cst.UnaryOperation:
        return is_infinite(expr.expression, facts)
    if type(expr) is cst.Call and facts.canonical(expr.func) == "float" and expr.args:
        arg = expr.args[0].value
        return type(arg) is cst.SimpleString and "inf" in arg.value.lower()
    name = facts.canonical(expr) or ""
    return name.endswith(".inf")


def keyword(call: cst.Call, *names: str) -> cst.BaseExpression | None:
    return next((a.value for a in call.args if a.keyword is not None and a.keyword.value in names), None)


def positional(call: cst.Call) -> list[cst.BaseExpression]:
    return [a.value for a in call.args if a.keyword is None and not a.star]


def string_value(expr: cst.BaseExpression) -> str | None:
    if type(expr) is cst.SimpleString:
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None


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
        self.unpacks: dict[tuple[int, str], tuple[cst.BaseExpression, int, int]] = {}
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
            for position, element in enumerate(target.elements):
                if type(element.value) is cst.Name:
                    self.index.unpacks[(id(fn), element.value.value)] = (
                        value,
                        position,
                        len(target.elements),
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


# -- results --------------------------------------------------------------------


@dataclass(frozen=True)
class Quantity:
    """What a number is (``seq_len``) and the evidence (``S = query.shape[1]``)."""

    kind: str
    evidence: str


@dataclass(frozen=True)
class Term:
    """One factor of a scale: ``kind ** power``; kind None for an unknown factor, "const" for a literal."""

    kind: str | None
    power: float
    evidence: str


@dataclass
class Softmax:
    call: cst.Call
    input: cst.BaseExpression
    dim: cst.BaseExpression | None
    has_dim: bool
    spelled: Callable[[], str] = field(compare=False, repr=False)  # ``where``, built for messages only
    module: cst.Call | None = None  # the ``nn.Softmax(...)`` whose dim applies, for module calls

    @property
    def where(self) -> str:
        """How the softmax is spelled, for messages (``F.softmax``, ``attn.softmax``)."""
        return self.spelled()


@dataclass
class Factor:
    """A multiplication or division applied to the scores or to q/k before the product."""

    node: cst.CSTNode
    value: cst.BaseExpression
    divides: bool
    fn: FunctionFacts


@dataclass
class _MaskEvidence:
    """What the lineage of a mask shows: its names, 0/1 evidence, additive evidence."""

    names: list[str] = field(default_factory=list)
    binary: list[str] = field(default_factory=list)
    additive: list[str] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)


@dataclass
class MaskUse:
    node: cst.CSTNode
    mask: cst.BaseExpression
    how: str  # "multiplied" or "added"
    binary: str | None  # evidence the mask is 0/1
    additive: str | None  # evidence it was converted to an additive mask


@dataclass
class Pipeline:
    """Everything between the q·kᵀ products and a softmax."""

    softmax: Softmax
    fn: FunctionFacts
    products: list[cst.CSTNode] = field(default_factory=list)
    operands: list[cst.BaseExpression] = field(default_factory=list)
    factors: list[Factor] = field(default_factory=list)
    masks: list[MaskUse] = field(default_factory=list)
    scale_argument: bool = False
    ranks: list[int] = field(default_factory=list)

    @property
    def rank(self) -> int | None:
        return max(self.ranks) if self.ranks else None


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


def _written(node: cst.CSTNode) -> cst.CSTNode:
    """The parsed node standing for ``node``: facts.py writes ``x /= s`` as a new ``x / s``
    around the parsed target and ``a, b = t`` as a new ``t[0]`` around the parsed value."""
    while type(node) in (cst.BinaryOperation, cst.Subscript):
        inner = node.left if type(node) is cst.BinaryOperation else node.value
        if inner is node:
            break
        node = inner
    return node


class Semantics:
    """The semantic view of one file; get it with ``of(context)``."""

    def __init__(self, module: cst.Module, facts: FileFacts) -> None:
        self.module = module
        self.facts = facts
        self.index = _Index(facts)
        _IndexBuilder(facts, self.index).build(module)
        self._reaches: dict[int, bool] = {}
        self._pipelines: dict[int, Pipeline | None] = {}
        self._orders: dict[int, _Layout] = {}
        self._products: dict[int, list[tuple[str, str]]] = {}
        self._values: dict[tuple[int, int], list[tuple[cst.BaseExpression, FunctionFacts | None]]] = {}
        self._lineages: dict[int, dict[int, cst.CSTNode]] = {}  # per function: _attention_lineage
        self._multiplications_in: dict[int, dict[int, cst.BinaryOperation]] = {}  # per function
        self._iterated: dict[int, set[str]] = {}  # per function: _modules_iterated
        self._softmaxes: dict[tuple[int, int], tuple[cst.Call, Softmax | None]] = {}

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

    # -- quantities --------------------------------------------------------------

    def quantity(
        self,
        expr: cst.BaseExpression,
        fn: FunctionFacts | None,
        operands: frozenset[str] = frozenset(),
        depth: int = 0,
    ) -> Quantity | None:
        """What dimension a Python number is, with the evidence; None when unknown."""
        if depth > 6:
            return None
        name = expr.value if type(expr) is cst.Name else self_attribute(expr)
        if name is not None:
            unpacked = self.index.unpacks.get((id(fn), name)) if type(expr) is cst.Name and fn else None
            if unpacked is not None and len(fn.assignments.get(name, [])) == 1:
                source, position, arity = unpacked
                kind = self._axis_of_shape(source, position, arity, fn, operands)
                if kind is not None:
                    return Quantity(kind, f"{name} = {self.code(source)}[{position}]")
            hop = self.single(expr, fn)
            if hop is not None:
                found = self.quantity(hop[0], hop[1], operands, depth + 1)
                if found is not None:
                    return Quantity(found.kind, f"{self.code(expr)} = {self.code(hop[0])}")
            kind = name_quantity(name)
            if kind == "d_model" and self._times_heads(expr, fn):
                return Quantity("head_dim", f"{self.code(expr)} (times the head count it is a projection's width)")
            return Quantity(kind, self.code(expr)) if kind else None
        if type(expr) is cst.Call:
            func = self.facts.canonical(expr.func) or ""
            args = positional(expr)
            if func in {"int", "float", "math.floor", "math.ceil", "round"} and len(args) == 1:
                return self.quantity(args[0], fn, operands, depth + 1)
            if method_name(expr) == "size" and type(expr.func) is cst.Attribute:
                dim = args[0] if args else keyword(expr, "dim")
                index = whole_number(number(dim)) if dim is not None else None
                if index is not None:
                    kind = self._axis_of_tensor(expr.func.value, index, None, fn, operands)
                    return Quantity(kind, self.code(expr)) if kind else None
            return None
        if type(expr) is cst.Subscript and len(expr.slice) == 1:
            element = expr.slice[0].slice
            index = whole_number(number(element.value)) if type(element) is cst.Index else None
            base = expr.value
            if index is not None and self._is_shape(base):
                tensor = base.value if type(base) is cst.Attribute else base.func.value  # type: ignore[union-attr]
                kind = self._axis_of_tensor(tensor, index, None, fn, operands)
                return Quantity(kind, self.code(expr)) if kind else None
            return None
        if type(expr) is cst.BinaryOperation and type(expr.operator) in (cst.FloorDivide, cst.Divide):
            left = self.quantity(expr.left, fn, operands, depth + 1)
            right = self.quantity(expr.right, fn, operands, depth + 1)
            if right and right.kind == "num_heads" and (left is None or left.kind == "d_model"):
                return Quantity("head_dim", self.code(expr))
        return None

    def _times_heads(self, expr: cst.BaseExpression, fn: FunctionFacts | None) -> bool:
        """A width named like the model's that the class multiplies by a head count
        (ESMFold's ``self.hidden_dim = config.ipa_dim`` with ``config.ipa_dim *
        config.num_heads_ipa`` as the projection width): it is the width of one head."""
        owner = fn.owner if fn is not None else None
        if owner is None:
            return False
        spellings = {self.code(expr)} | {self.code(v) for v, _ in self.values(expr, fn)}
        return any(
            (left in spellings and _HEAD_COUNT.search(right)) or (right in spellings and _HEAD_COUNT.search(left))
            for left, right in self._multiplications(owner)
        )

    def _multiplications(self, owner: ClassFacts) -> list[tuple[str, str]]:
        """Every ``a * b`` in the class's methods, as the code of both sides, built once."""
        found = self._products.get(id(owner))
        if found is None:
            found = [
                (self.code(node.left), self.code(node.right))
                for method in owner.methods.values()
                for node in _walk_expression(method.node.body)
                if type(node) is cst.BinaryOperation and type(node.operator) is cst.Multiply
            ]
            self._products[id(owner)] = found
        return found

    @staticmethod
    def _is_shape(node: cst.BaseExpression) -> bool:
        if type(node) is cst.Attribute and node.attr.value == "shape":
            return True
        return type(node) is cst.Call and method_name(node) == "size" and not node.args

    def _axis_of_shape(
        self,
        source: cst.BaseExpression,
        position: int,
        arity: int,
        fn: FunctionFacts,
        operands: frozenset[str],
    ) -> str | None:
        if not self._is_shape(source):
            return None
        tensor = source.value if type(source) is cst.Attribute else source.func.value  # type: ignore[attr-defined]
        if arity == 4 and self._flattens_image(tensor, source, fn):
            # VQ-GAN attention: ``b, c, h, w = q.shape`` then ``q.reshape(b, c, h * w)``:
            # one head whose width is the channel count, over h * w positions.
            return {0: "batch", 1: "head_dim"}.get(position)
        if arity == 3 and self._channels_first(source):
            # ``batch, channels, seq_len = q.shape`` of a Conv1d's output (WavTokenizer's Vocos
            # attention): the names put the features before the positions.
            return {0: "batch", 1: "d_model", 2: "seq_len"}.get(position)
        return self._axis_of_tensor(tensor, position, arity, fn, operands)

    def _channels_first(self, shape: cst.BaseExpression) -> bool:
        """The three names ``shape`` is unpacked into call its last axis the sequence, and not
        its middle one: a (batch, channels, length) tensor, whatever (b, s, d) layout its rank
        would suggest."""
        names = self.index.unpack_names.get(id(shape), ())
        kinds = [name_quantity(name) if name is not None else None for name in names]
        return len(kinds) == 3 and kinds[2] == "seq_len" and kinds[1] != "seq_len"

    def _flattens_image(self, tensor: cst.BaseExpression, shape: cst.BaseExpression, fn: FunctionFacts) -> bool:
        """``tensor`` (unpacked from ``shape`` as b, c, h, w) is reshaped to (b, c, h * w):
        an image whose channels stay whole, not a (batch, heads, seq, head_dim) tensor."""
        if type(tensor) is not cst.Name:
            return False

        def unpacked_at(expr: cst.BaseExpression) -> int | None:
            found = self.index.unpacks.get((id(fn), expr.value)) if type(expr) is cst.Name else None
            return found[1] if found is not None and found[0] is shape else None

        for call in fn.calls:
            if method_name(call) not in {"view", "reshape"}:
                continue
            receiver, args = call.func.value, _shape_args(call)  # type: ignore[attr-defined]
            if (
                type(receiver) is cst.Name
                and receiver.value == tensor.value
                and len(args) == 3
                and unpacked_at(args[1]) == 1
                and type(args[2]) is cst.BinaryOperation
                and type(args[2].operator) is cst.Multiply
                and {unpacked_at(args[2].left), unpacked_at(args[2].right)} == {2, 3}
            ):
                return True
        return False

    def _axis_of_tensor(
        self,
        tensor: cst.BaseExpression,
        index: int,
        arity: int | None,
        fn: FunctionFacts | None,
        operands: frozenset[str],
    ) -> str | None:
        """Which axis ``tensor.shape[index]`` is, from the tensor's rank and role."""
        evident = self.rank(tensor, fn)
        rank = arity or evident
        # ``b, s, d = q.shape`` before ``q`` is split into heads: a (batch, seq, d_model) view of
        # it. The split comes later, so every value of the name counts here, reachable or not.
        widest = evident
        if type(tensor) is cst.Name and fn is not None:
            later = [self.rank(v, fn) for v in fn.assignments.get(tensor.value, [])]
            widest = max((r for r in [evident, *later] if r is not None), default=None)
        pre_split = arity is not None and widest is not None and arity < widest
        if rank is not None and index < 0:
            index += rank
        name = dotted_name(tensor) or ""
        if rank == 4:
            return {0: "batch", 1: "num_heads", 2: "seq_len", 3: "head_dim"}.get(index)
        if name in operands and not pre_split:
            if index == -1 or (rank == 3 and index == 2):
                return "head_dim"
            return "seq_len" if index == -2 or (rank == 3 and index == 1) else None
        raw = pre_split or self.is_raw_input(tensor, fn)
        if rank == 3 or (rank is None and raw):
            if index == 1:
                return "seq_len"
            if index == 0:
                return "batch"
            if raw and index in (2, -1):
                return "d_model"
        return None

    def is_raw_input(self, tensor: cst.BaseExpression, fn: FunctionFacts | None) -> bool:
        """A forward parameter that this function projects or splits: a (batch, seq, d_model) input."""
        if not self.is_param(tensor, fn) or fn is None:
            return False
        name = tensor.value  # type: ignore[attr-defined]
        for call in fn.calls:
            receiver = call.func.value if type(call.func) is cst.Attribute else None
            if (
                type(receiver) is cst.Name
                and receiver.value == name
                and method_name(call) in {"view", "reshape", "unflatten"}
            ):
                return True
            projects = (
                self_attribute(call.func) or self.facts.canonical(call.func) == "torch.nn.functional.linear"
            )
            if projects and any(type(a) is cst.Name and a.value == name for a in positional(call)[:1]):
                return True
        return False

    # -- ranks -------------------------------------------------------------------

    def rank(self, expr: cst.BaseExpression, fn: FunctionFacts | None, depth: int = 0) -> int | None:
        """The tensor rank an expression evidently has (from view/reshape/rearrange), or None."""
        if depth > 8:
            return None
        if type(expr) in (cst.Name, cst.Attribute) and (
            type(expr) is cst.Name or self_attribute(expr)
        ):
            found = [self.rank(v, f, depth + 1) for v, f in self.values(expr, fn)]
            known = [r for r in found if r is not None]
            return max(known) if known else None
        if type(expr) is cst.Subscript:
            inner = self.rank(expr.value, fn, depth + 1)
            value = expr.value
            if type(value) is cst.Call and method_name(value) in {"chunk", "split", "tensor_split"}:
                return inner
            element = expr.slice[0].slice if len(expr.slice) == 1 else None
            if inner is not None and type(element) is cst.Index and number(element.value) is not None:
                return inner - 1
            return inner
        if type(expr) is cst.BinaryOperation:
            sides = [self.rank(expr.left, fn, depth + 1), self.rank(expr.right, fn, depth + 1)]
            known = [r for r in sides if r is not None]
            return max(known) if known else None
        if type(expr) is not cst.Call:
            return None
        return self._call_rank(expr, fn, depth)

    def _call_rank(self, call: cst.Call, fn: FunctionFacts | None, depth: int) -> int | None:
        method = method_name(call)
        func = self.facts.canonical(call.func) or ""
        args = positional(call)
        if method in {"view", "reshape"} and not func.startswith("torch."):
            if any(a.star for a in call.args):
                return None
            if len(args) == 1 and type(args[0]) in (cst.Tuple, cst.List):
                return len(args[0].elements)
            return len(args) if len(args) > 1 else None
        if method == "permute" and len(args) > 1:
            return len(args)
        if func.endswith("rearrange") and len(args) >= 2:
            pattern = string_value(args[1])
            if pattern and "->" in pattern:
                return _count_axes(pattern.split("->")[1])
        if func == "torch.einsum" and args:
            spec = string_value(args[0])
            if spec and "->" in spec and "..." not in spec.split("->")[1]:  # ``...`` hides the rank
                return len(spec.split("->")[1].replace(" ", ""))
        if func == "torch.bmm" or func == "torch.baddbmm":
            return 3
        if method in {"unsqueeze"} and type(call.func) is cst.Attribute:
            inner = self.rank(call.func.value, fn, depth + 1)
            return inner + 1 if inner is not None else None
        if method == "unbind" and type(call.func) is cst.Attribute:
            inner = self.rank(call.func.value, fn, depth + 1)
            return inner - 1 if inner is not None else None
        if func == "torch.matmul" and len(args) == 2:
            sides = [r for r in (self.rank(a, fn, depth + 1) for a in args) if r is not None]
            return max(sides) if sides else None
        if (method in _SHAPE_KEEPING or method in {"chunk", "split"}) and isinstance(
            call.func, cst.Attribute
        ):
            return self.rank(call.func.value, fn, depth + 1)
        if self_attribute(call.func) and args:
            return self.rank(args[0], fn, depth + 1)
        return None

    # -- softmax ---------------------------------------------------------------

    def softmax(self, call: cst.Call, fn: FunctionFacts | None) -> Softmax | None:
        """Recognise F.softmax, torch.softmax, x.softmax, nn.Softmax()(x) and self.softmax(x).
        Several rules ask about every call of a file: each call is read once per function, but
        for the commonest, told apart before that memo: a method other than ``softmax`` of
        anything but ``self``, and a plain name other than a softmax's."""
        callee = call.func
        if other_method(callee, "softmax"):
            return None
        if type(callee) is cst.Name and self.facts.canonical(callee) not in _SOFTMAX:
            return None
        key = (id(call), id(fn))
        known = self._softmaxes.get(key)
        if known is not None and known[0] is call:
            return known[1]
        found = self._read_softmax(call, fn)
        self._softmaxes[key] = (call, found)
        return found

    def _read_softmax(self, call: cst.Call, fn: FunctionFacts | None) -> Softmax | None:
        # The ``spelled`` functions capture the module, not ``self``: a Softmax is kept in
        # ``self._softmaxes``, and a cycle would keep the whole tree alive until Python's
        # collector runs (which lint workers pause).
        callee = call.func
        module = self.module
        func = self.facts.canonical(callee) or ""
        args = positional(call)
        if func in _SOFTMAX and args:
            dim = args[1] if len(args) > 1 else keyword(call, "dim")
            return Softmax(call, args[0], dim, dim is not None, lambda: short_code(module, call.func))
        if (
            method_name(call) == "softmax"
            and not func.startswith("torch.")
            and type(call.func) is cst.Attribute
            and self_attribute(call.func) is None
        ):
            dim = args[0] if args else keyword(call, "dim")
            receiver = call.func.value
            return Softmax(call, receiver, dim, dim is not None, lambda: f"{short_code(module, receiver)}.softmax")
        nn_softmax = self._softmax_module(call.func, fn)
        if nn_softmax is not None and args:
            margs = positional(nn_softmax)
            dim = margs[0] if margs else keyword(nn_softmax, "dim")
            return Softmax(call, args[0], dim, dim is not None, lambda: short_code(module, nn_softmax), nn_softmax)
        return None

    def _softmax_module(self, func: cst.BaseExpression, fn: FunctionFacts | None) -> cst.Call | None:
        if self_attribute(func) is None and type(func) is not cst.Call:
            return None
        candidates = [func] if type(func) is cst.Call else [v for v, _ in self.values(func, fn)]
        for value in candidates:
            if type(value) is cst.Call and self.facts.canonical(value.func) == "torch.nn.Softmax":
                return value
        return None

    # -- products q·kᵀ ---------------------------------------------------------

    def product_operands(self, node: cst.CSTNode) -> list[cst.BaseExpression] | None:
        """The q and k of a q·kᵀ product (``@``, matmul, bmm, baddbmm, einsum), else None."""
        kind = type(node)
        if kind is cst.BinaryOperation and type(node.operator) is cst.MatrixMultiply:
            return [node.left, node.right]
        if kind is not cst.Call or (type(node.func) is cst.Attribute and node.func.attr.value not in _PRODUCT_NAMES):
            return None  # no alias expansion changes a dotted callee's last name
        func = self.facts.canonical(node.func) or ""
        args = positional(node)
        if func in _PRODUCTS or func.endswith(".einsum"):
            if "einsum" in func or func.endswith("contract"):
                return args[1:3] if len(args) >= 3 and string_value(args[0]) is not None else None
            if func.endswith("baddbmm"):
                return args[1:3] if len(args) >= 3 else None
            return args[:2] if len(args) >= 2 else None
        if method_name(node) in {"matmul", "bmm"} and type(node.func) is cst.Attribute and args:
            return [node.func.value, args[0]]
        return None

    def reaches_product(self, expr: cst.BaseExpression, fn: FunctionFacts | None, depth: int = 0) -> bool:
        """Whether the lineage of ``expr`` contains a q·kᵀ product."""
        key = id(expr)
        if key in self._reaches:
            return self._reaches[key]
        self._reaches[key] = False  # cycles end here
        found = depth < 12 and self._children_reach(expr, fn, depth)
        self._reaches[key] = found
        return found

    def _children_reach(self, expr: cst.BaseExpression, fn: FunctionFacts | None, depth: int) -> bool:
        """Whether ``expr`` is a product or one of its parts reaches one, in order, stopping at
        the first that does (what the memo of ``reaches_product`` records depends on it)."""
        if self.product_operands(expr) is not None:
            return True
        deeper, kind = depth + 1, type(expr)  # exact classes: isinstance on libcst's is slow
        if kind is cst.Name:
            return any(self.reaches_product(value, vfn, deeper) for value, vfn in self.values(expr, fn))
        if kind is cst.BinaryOperation:
            return self.reaches_product(expr.left, fn, deeper) or self.reaches_product(expr.right, fn, deeper)
        if kind is cst.Subscript:
            return self.reaches_product(expr.value, fn, deeper)
        if kind is cst.Call and self.softmax(expr, fn) is None:
            if (
                type(expr.func) is cst.Attribute
                and not self_attribute(expr.func)
                and self.reaches_product(expr.func.value, fn, deeper)
            ):
                return True
            return any(self.reaches_product(arg.value, fn, deeper) for arg in expr.args)
        return False

    # -- the pipeline from products to a softmax ----------------------------------

    def pipeline(self, softmax: Softmax, fn: FunctionFacts | None) -> Pipeline | None:
        """The scores feeding ``softmax``, or None when its input is not built from q·kᵀ here."""
        key = id(softmax.call)
        if key not in self._pipelines:
            result = None
            if fn is not None and self.reaches_product(softmax.input, fn):
                result = Pipeline(softmax, fn)
                self._walk_scores(softmax.input, fn, result, set())
            self._pipelines[key] = result
        return self._pipelines[key]

    def dual_softmax(self, softmax: Softmax, fn: FunctionFacts | None) -> bool:
        """The same scores normalised over another dim and the two multiplied: the dual-softmax
        of feature matching (LoFTR: ``softmax(sim, 1) * softmax(sim, 2)``), where both are meant
        and the similarity is not attention."""
        if fn is None or softmax.dim is None:
            return False
        product = self._multiplied(fn).get(id(softmax.call))
        if product is None:
            return False
        other = product.right if product.left is softmax.call else product.left
        found = self.softmax(other, fn) if type(other) is cst.Call else None
        return (
            found is not None
            and found.dim is not None
            and self.code(found.input) == self.code(softmax.input)
            and self.code(found.dim) != self.code(softmax.dim)
        )

    def _multiplied(self, fn: FunctionFacts) -> dict[int, cst.BinaryOperation]:
        """Each node of ``fn``'s body that is a side of an ``a * b``, by id, with that product:
        a parsed node has one parent, so one product at most. Built once per function."""
        found = self._multiplications_in.get(id(fn))
        if found is None:
            found = {}
            preorder = fn.preorder
            for node in preorder.nodes[preorder.where[id(fn.node.body)]:]:  # the body: the last child
                if type(node) is cst.BinaryOperation and type(node.operator) is cst.Multiply:
                    found[id(node.left)] = found[id(node.right)] = node
            self._multiplications_in[id(fn)] = found
        return found

    def _walk_scores(
        self, expr: cst.BaseExpression, fn: FunctionFacts, out: Pipeline, seen: set[int]
    ) -> None:
        if id(expr) in seen:
            return
        seen.add(id(expr))
        operands = self.product_operands(expr)
        if operands is not None:
            self._record_product(expr, operands, fn, out)
            return
        if type(expr) is cst.Name:
            for value, vfn in self.values(expr, fn):
                if vfn is not None and not self._after_and_from(value, vfn, out.softmax.call, fn):
                    self._walk_scores(value, vfn, out, seen)
        elif type(expr) is cst.Subscript:
            self._walk_scores(expr.value, fn, out, seen)
        elif type(expr) is cst.BinaryOperation:
            self._walk_binary(expr, fn, out, seen)
        elif type(expr) is cst.Call:
            self._walk_call(expr, fn, out, seen)

    def _after_and_from(
        self, value: cst.BaseExpression, vfn: FunctionFacts, softmax: cst.Call, fn: FunctionFacts
    ) -> bool:
        """``value`` is written after ``softmax`` and computed from its result."""
        if vfn is not fn:
            return False
        layout = self._layout(fn)
        after = layout.position(value, -1) > layout.position(softmax, len(layout.where))
        return after and self._consumes(value, vfn, softmax)

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

    def _consumes(self, expr: cst.BaseExpression, fn: FunctionFacts | None, target: cst.Call) -> bool:
        """Whether ``expr`` is computed from ``target``'s result. A name rebound after the
        softmax (``attn = attn.softmax(-1); attn = attn[:, 0] - lam * attn[:, 1]``) holds that
        later value too, in this flow-insensitive view; it is not what the softmax reads.
        Breadth first, so the nearest values are looked at before long lineages."""
        queue, seen = deque([(expr, fn)]), {id(expr)}
        while queue and len(seen) < 400:
            current, where = queue.popleft()
            nodes = list(_walk_expression(current))
            local = {  # ``for lin, x in ...`` binds names of its own, not the function's
                n.value for c in nodes if type(c) is cst.CompFor
                for n in _walk_expression(c.target) if type(n) is cst.Name
            }
            for node in nodes:
                if node is target:
                    return True
                if type(node) is cst.Name and node.value not in local:
                    for value, vfn in self.values(node, where):
                        if id(value) not in seen:
                            seen.add(id(value))
                            queue.append((value, vfn))
        return False

    def _walk_binary(
        self, expr: cst.BinaryOperation, fn: FunctionFacts, out: Pipeline, seen: set[int]
    ) -> None:
        left = self.reaches_product(expr.left, fn)
        right = self.reaches_product(expr.right, fn)
        if left and right and type(expr.operator) in (cst.Multiply, cst.Divide):
            # ``q @ k * q.size(-1) ** -0.5``: a Python scalar is a factor, never the scores, even
            # when its tensor's name is rebound to an attention output later in the function.
            left, right = not self.is_scalar(expr.left, fn), not self.is_scalar(expr.right, fn)
        if left == right:
            if left and type(expr.operator) in (cst.Add, cst.Subtract):
                self._walk_terms(expr, lambda side: self._walk_scores(side, fn, out, seen), out)
            elif left:
                self._walk_scores(expr.left, fn, out, seen)
                self._walk_scores(expr.right, fn, out, seen)
            return
        scores, other = (expr.left, expr.right) if left else (expr.right, expr.left)
        op = expr.operator
        if type(op) in (cst.Multiply, cst.Divide):
            self._other_factor(expr, other, type(op) is cst.Divide and other is expr.right, fn, out)
        elif type(op) in (cst.Add, cst.Subtract) and not _is_tf_style_mask_term(other, self):
            self._other_term(expr, other, fn, out)
        elif type(op) in (cst.Add, cst.Subtract):
            self._walk_tf_style(scores, fn, out, seen)  # ``scores * mask - 1e4 * (1 - mask)`` is fine
            return
        self._walk_scores(scores, fn, out, seen)

    @staticmethod
    def _walk_terms(expr: cst.BinaryOperation, walk_side, out: Pipeline) -> None:
        """Walk both terms of a sum, keeping the scale factors of one: in ``q * s + b * s``
        (Funnel's ``q_head + r_w_bias``, both scaled) or ``c2p / s + p2c / s`` each term
        carries the scale of the whole sum, which is applied once, not twice."""
        start = len(out.factors)
        walk_side(expr.left)
        middle = len(out.factors)
        walk_side(expr.right)
        if middle > start:
            del out.factors[middle:]

    def _walk_tf_style(
        self, scores: cst.BaseExpression, fn: FunctionFacts, out: Pipeline, seen: set[int]
    ) -> None:
        if type(scores) is cst.BinaryOperation:
            for side in (scores.left, scores.right):
                if self.reaches_product(side, fn):
                    self._walk_scores(side, fn, out, seen)

    def _walk_call(self, call: cst.Call, fn: FunctionFacts, out: Pipeline, seen: set[int]) -> None:
        if keyword(call, "scale", "scaling", "softmax_scale", "sm_scale") is not None:
            out.scale_argument = True
        method = method_name(call)
        func = self.facts.canonical(call.func) or ""
        args = positional(call)
        receiver = call.func.value if type(call.func) is cst.Attribute else None
        if (
            method in {"mul", "mul_", "multiply", "div", "div_", "divide", "true_divide"}
            and args
            and receiver is not None
            and not func.startswith("torch.")
        ):
            self._other_factor(call, args[0], method.startswith(("div", "true")), fn, out)
            self._walk_scores(receiver, fn, out, seen)
            return
        if (
            func in {"torch.mul", "torch.div", "torch.multiply", "torch.divide", "torch.true_divide"}
            and len(args) == 2
        ):
            left = self.reaches_product(args[0], fn)
            scores, other = (args[0], args[1]) if left else (args[1], args[0])
            self._other_factor(call, other, "div" in func and other is args[1], fn, out)
            self._walk_scores(scores, fn, out, seen)
            return
        if func == "torch.add" and len(args) == 2:
            left = self.reaches_product(args[0], fn)
            scores, other = (args[0], args[1]) if left else (args[1], args[0])
            self._other_term(call, other, fn, out)
            self._walk_scores(scores, fn, out, seen)
            return
        if receiver is not None and not self_attribute(call.func) and self.reaches_product(receiver, fn):
            self._walk_scores(receiver, fn, out, seen)
        for arg in call.args:
            if self.reaches_product(arg.value, fn):
                self._walk_scores(arg.value, fn, out, seen)

    def _record_product(
        self, node: cst.CSTNode, operands: list[cst.BaseExpression], fn: FunctionFacts, out: Pipeline
    ) -> None:
        out.products.append(node)
        out.operands.extend(operands)
        rank = self.rank(node, fn) if type(node) is cst.Call else None
        ranks = [rank] if rank is not None else [self.rank(o, fn) for o in operands]
        out.ranks.extend(r for r in ranks if r is not None)
        if type(node) is cst.Call:
            alpha = keyword(node, "alpha")
            if alpha is not None and (self.facts.canonical(node.func) or "").endswith("baddbmm"):
                out.factors.append(Factor(alpha, alpha, False, fn))
        # A factor on q reached again through a second product (``q @ k + q @ rel``: VITS,
        # Nyströmformer) scales their sum once. Within one product it may count twice: a
        # scaled tensor that is both q and k (``q @ q.T``) is scaled on both sides.
        before = {id(f.node) for f in out.factors}
        start = len(out.factors)
        for operand in operands:
            self._walk_operand(operand, fn, out, set())
        out.factors[start:] = [f for f in out.factors[start:] if id(f.node) not in before]

    def operand_factors(self, expr: cst.BaseExpression, fn: FunctionFacts) -> bool:
        """Whether a scale factor (or a ``scale=`` argument) is applied to ``expr``'s lineage:
        what a caller passes as q or k to a helper that computes the scores."""
        scratch = Pipeline(Softmax(cst.Call(cst.Name("softmax")), expr, None, False, lambda: ""), fn)
        self._walk_operand(expr, fn, scratch, set())
        return bool(scratch.factors) or scratch.scale_argument

    def _walk_operand(
        self, expr: cst.BaseExpression, fn: FunctionFacts | None, out: Pipeline, seen: set[int]
    ) -> None:
        """Collect scale factors applied to q or k before the product (``q = q * self.scale``)."""
        if id(expr) in seen or fn is None or len(seen) > 60:
            return
        seen.add(id(expr))
        if type(expr) is cst.Name:
            for value, vfn in self.values(expr, fn):
                self._walk_operand(value, vfn, out, seen)
        elif type(expr) is cst.Subscript:
            self._walk_operand(expr.value, fn, out, seen)
        elif type(expr) is cst.BinaryOperation and type(expr.operator) in (cst.Multiply, cst.Divide):
            if self.is_scalar(expr.right, fn):
                out.factors.append(Factor(expr, expr.right, type(expr.operator) is cst.Divide, fn))
                self._walk_operand(expr.left, fn, out, seen)
            elif type(expr.operator) is cst.Multiply and self.is_scalar(expr.left, fn):
                out.factors.append(Factor(expr, expr.left, False, fn))
                self._walk_operand(expr.right, fn, out, seen)
        elif type(expr) is cst.BinaryOperation and type(expr.operator) in (cst.Add, cst.Subtract):
            self._walk_terms(expr, lambda side: self._walk_operand(side, fn, out, seen), out)
        elif type(expr) is cst.Call:
            self._walk_operand_call(expr, fn, out, seen)

    def _walk_operand_call(self, call: cst.Call, fn: FunctionFacts, out: Pipeline, seen: set[int]) -> None:
        if keyword(call, "scale", "scaling", "softmax_scale") is not None:
            out.scale_argument = True
        if self_attribute(call.func) is not None and self.module_kind(
            fn.owner, self_attribute(call.func) or ""
        ):
            return  # a projection: what came before it is not q or k
        method = method_name(call)
        args = positional(call)
        if method in {"mul", "mul_", "div", "div_", "divide"} and args and self.is_scalar(args[0], fn):
            out.factors.append(Factor(call, args[0], method.startswith("div"), fn))
        if type(call.func) is cst.Attribute and not self_attribute(call.func):
            self._walk_operand(call.func.value, fn, out, seen)
            return  # a method's arguments (view sizes, dims) are not q or k
        for index, arg in enumerate(args):
            # the tensor a helper reshapes may be scaled in place: ``self._shape(q_proj(x) * s, ...)``
            if type(arg) in (cst.Name, cst.Call, cst.Subscript) or (
                index == 0 and type(arg) is cst.BinaryOperation
            ):
                self._walk_operand(arg, fn, out, seen)

    def is_scalar(self, expr: cst.BaseExpression, fn: FunctionFacts | None, depth: int = 0) -> bool:
        """A Python or 0-d scale factor rather than a tensor (mask, cos, sin)."""
        if depth > 6:
            return False
        name = expr.value if type(expr) is cst.Name else self_attribute(expr)
        if name is not None:
            if _SCALE_NAME.search(name) or name_quantity(name):
                return True
            hop = self.single(expr, fn)
            return hop is not None and self.is_scalar(hop[0], hop[1], depth + 1)
        if type(expr) is cst.Attribute and _SCALE_NAME.search(expr.attr.value):
            return True  # a sub-module's scale: diffusers' ``query * self.attn.scale``
        if number(expr) is not None or self.quantity(expr, fn) is not None:
            return True
        if type(expr) is cst.Subscript:
            return self._is_shape(expr.value)
        if type(expr) is cst.BinaryOperation:
            if type(expr.operator) is cst.Power:
                return number(expr.right) is not None and self.is_scalar(expr.left, fn, depth + 1)
            return self.is_scalar(expr.left, fn, depth + 1) and self.is_scalar(expr.right, fn, depth + 1)
        if type(expr) is cst.Call:
            func = self.facts.canonical(expr.func) or ""
            method = method_name(expr)
            if func.startswith("math.") or func in {
                "float",
                "int",
                "torch.tensor",
                "torch.sqrt",
                "torch.rsqrt",
                "np.sqrt",
                "numpy.sqrt",
            }:
                return all(self.is_scalar(a, fn, depth + 1) for a in positional(expr)[:1])
            if method == "size":
                return True
            if method in {"sqrt", "rsqrt", "float", "item", "to", "type", "half", "double", "bfloat16"} and isinstance(
                expr.func, cst.Attribute
            ):  # DeBERTa's ``query_layer / scale.to(dtype=query_layer.dtype)``
                return self.is_scalar(expr.func.value, fn, depth + 1)
        return False

    def _other_factor(
        self, node: cst.CSTNode, other: cst.BaseExpression, divides: bool, fn: FunctionFacts, out: Pipeline
    ) -> None:
        mask = self.mask_info(other, fn)
        if mask is not None:
            out.masks.append(MaskUse(node, other, "multiplied", *mask))
        else:
            out.factors.append(Factor(node, other, divides, fn))

    def _other_term(
        self, node: cst.CSTNode, other: cst.BaseExpression, fn: FunctionFacts, out: Pipeline
    ) -> None:
        mask = self.mask_info(other, fn)
        if mask is not None:
            out.masks.append(MaskUse(node, other, "added", *mask))

    # -- scale terms ---------------------------------------------------------------

    def terms(
        self,
        expr: cst.BaseExpression,
        fn: FunctionFacts | None,
        power: float = 1.0,
        operands: frozenset[str] = frozenset(),
        depth: int = 0,
    ) -> list[Term]:
        """``expr`` as a product of quantities to powers: ``1/math.sqrt(d_k)`` is head_dim**-0.5."""
        if depth > 8:
            return [Term(None, power, self.code(expr))]
        found = self.quantity(expr, fn, operands)
        if found is not None:
            return [Term(found.kind, power, found.evidence)]
        value = number(expr)
        if value is not None:
            return [] if value == 1 else [Term("const", power, self.code(expr))]
        if type(expr) is cst.Name or self_attribute(expr):
            hop = self.single(expr, fn)
            if hop is not None:
                return self.terms(hop[0], hop[1], power, operands, depth + 1)
            return [Term(None, power, self.code(expr))]
        if type(expr) is cst.BinaryOperation:
            return self._binary_terms(expr, fn, power, operands, depth)
        if type(expr) is cst.Call:
            return self._call_terms(expr, fn, power, operands, depth)
        return [Term(None, power, self.code(expr))]

    def _binary_terms(
        self,
        expr: cst.BinaryOperation,
        fn: FunctionFacts | None,
        power: float,
        operands: frozenset[str],
        depth: int,
    ) -> list[Term]:
        op = expr.operator
        left = self.terms(expr.left, fn, power, operands, depth + 1)
        if type(op) is cst.Multiply:
            return left + self.terms(expr.right, fn, power, operands, depth + 1)
        if type(op) in (cst.Divide, cst.FloorDivide):
            return left + self.terms(expr.right, fn, -power, operands, depth + 1)
        if type(op) is cst.Power and number(expr.right) is not None:
            return self.terms(expr.left, fn, power * (number(expr.right) or 0.0), operands, depth + 1)
        return [Term(None, power, self.code(expr))]

    def _call_terms(
        self, call: cst.Call, fn: FunctionFacts | None, power: float, operands: frozenset[str], depth: int
    ) -> list[Term]:
        func = self.facts.canonical(call.func) or ""
        method = method_name(call)
        args = positional(call)
        short = func.rsplit(".", 1)[-1]
        if short == "sqrt" and len(args) == 1 and func != "sqrt":
            return self.terms(args[0], fn, power * 0.5, operands, depth + 1)
        if short == "rsqrt" and len(args) == 1:
            return self.terms(args[0], fn, power * -0.5, operands, depth + 1)
        if short == "pow" and len(args) == 2 and number(args[1]) is not None:
            return self.terms(args[0], fn, power * (number(args[1]) or 0.0), operands, depth + 1)
        if func in {"torch.tensor", "torch.as_tensor", "float", "int", "torch.scalar_tensor"} and args:
            return self.terms(args[0], fn, power, operands, depth + 1)
        if type(call.func) is cst.Attribute and not args:
            receiver = call.func.value
            if method == "sqrt":
                return self.terms(receiver, fn, power * 0.5, operands, depth + 1)
            if method == "rsqrt":
                return self.terms(receiver, fn, power * -0.5, operands, depth + 1)
            if method in {"float", "double", "item", "half"}:
                return self.terms(receiver, fn, power, operands, depth + 1)
        if method == "to" and type(call.func) is cst.Attribute:
            return self.terms(call.func.value, fn, power, operands, depth + 1)
        return [Term(None, power, self.code(call))]

    # -- masks -------------------------------------------------------------------

    def mask_info(
        self, expr: cst.BaseExpression, fn: FunctionFacts | None
    ) -> tuple[str | None, str | None] | None:
        """(binary evidence, additive evidence) when ``expr`` is a mask tensor, else None."""
        if self.is_scalar(expr, fn):
            return None
        found = _MaskEvidence()
        self._mask_lineage(expr, fn, found, 0)
        if not found.names and not found.binary:
            return None
        return (found.binary[0] if found.binary else None), (found.additive[0] if found.additive else None)

    def _mask_lineage(
        self, expr: cst.BaseExpression, fn: FunctionFacts | None, found: _MaskEvidence, depth: int
    ) -> None:
        if id(expr) in found.seen or depth > 10:
            return
        found.seen.add(id(expr))
        label = expr.value if type(expr) is cst.Name else self_attribute(expr)
        if label is not None:
            if _MASK_NAME.search(label):
                found.names.append(label)
            for value, vfn in self.values(expr, fn):
                self._mask_lineage(value, vfn, found, depth + 1)
            if self.is_param(expr, fn) and fn is not None and _MASK_NAME.search(label):
                described = _docstring_says_binary(fn, label)
                if described:
                    found.binary.append(described)
            return
        for node in _walk_expression(expr):
            self._classify_mask_node(node, fn, found, depth)

    def _classify_mask_node(
        self, node: cst.CSTNode, fn: FunctionFacts | None, found: _MaskEvidence, depth: int
    ) -> None:
        binary, additive = found.binary, found.additive
        if type(node) in (cst.Name, cst.Attribute) and (
            type(node) is cst.Name or self_attribute(node)
        ):
            self._mask_lineage(node, fn, found, depth + 1)
        elif type(node) is cst.Call:
            func = self.facts.canonical(node.func) or ""
            method = method_name(node) or ""
            if func in {
                "torch.tril",
                "torch.triu",
                "torch.ones",
                "torch.ones_like",
                "torch.eye",
            } or method in {"bool", "long", "int", "byte", "tril", "triu"}:
                binary.append(f"{self.code(node)} is 0/1")
            if method in {"masked_fill", "masked_fill_", "log"} or "finfo" in func or func == "torch.where":
                additive.append(self.code(node))
        elif type(node) is cst.Comparison:
            binary.append(f"{self.code(node)} is a bool comparison")
        elif type(node) is cst.UnaryOperation and type(node.operator) is cst.Minus:
            value = number(node)
            if (value is not None and value <= -100) or is_infinite(node, self.facts):
                additive.append(self.code(node))
        elif _is_big_literal(node) or is_infinite(node, self.facts):  # type: ignore[arg-type]
            additive.append(self.code(node))

    # -- modules -----------------------------------------------------------------

    def module_kind(self, klass: ClassFacts | None, attr: str) -> str | None:
        """The callee of ``self.attr = Callee(...)`` (either branch of a conditional), else None."""
        if klass is None:
            return None
        for value in klass.attributes.get(attr, []):
            for option in (value.body, value.orelse) if type(value) is cst.IfExp else (value,):
                if type(option) is cst.Call:
                    name = self.facts.canonical(option.func)
                    if name and not name.startswith(
                        (
                            "float",
                            "int",
                            "math.",
                            "torch.tensor",
                            "torch.zeros",
                            "torch.ones",
                            "torch.randn",
                            "torch.empty",
                        )
                    ):
                        return name
        return None

    def _is_module_container(self, klass: ClassFacts | None, attr: str) -> bool:
        kind = self.module_kind(klass, attr) or ""
        return kind.rsplit(".", 1)[-1] in {"ModuleList", "ModuleDict", "Sequential"}

    def _modules_iterated(self, fn: FunctionFacts) -> set[str]:
        """Names a ``for`` loop or comprehension of ``fn`` binds to the modules of a
        ``self.`` ModuleList (``for lin, x in zip(self.linears, inputs)``)."""
        names = self._iterated.get(id(fn))
        if names is not None:
            return names
        names = set()
        for node in _walk_expression(fn.node.body):
            if type(node) not in (cst.For, cst.CompFor):
                continue
            containers = [
                n for n in _walk_expression(node.iter)
                if (a := self_attribute(n)) is not None and self._is_module_container(fn.owner, a)
            ]
            if containers:
                names.update(n.value for n in _walk_expression(node.target) if type(n) is cst.Name)
        self._iterated[id(fn)] = names
        return names

    def is_dropout(self, klass: ClassFacts | None, attr: str) -> bool:
        kind = self.module_kind(klass, attr) or ""
        return kind.rsplit(".", 1)[-1] in _DROPOUT_KINDS

    def is_projection_module(self, klass: ClassFacts | None, attr: str) -> bool:
        """A module attribute that may project (Linear, Conv1D, 1x1 conv, Identity, custom)."""
        kind = self.module_kind(klass, attr)
        if kind is None:
            values = klass.attributes.get(attr, []) if klass is not None else []
            return any(
                self.facts.canonical(v) in {"torch.nn.Parameter", "nn.Parameter"}
                or (type(v) is cst.Call and (self.facts.canonical(v.func) or "").endswith("Parameter"))
                for v in values
            )
        short = kind.rsplit(".", 1)[-1]
        if re.match(r"(Conv|Linear|Dense)", short):
            return True  # timm's ConvNorm, ConvBnAct: a projection followed by a norm
        return not _NOT_PROJECTIONS.search(short) and short not in {"ModuleList", "ModuleDict"}

    def references_outside_init(
        self, klass: ClassFacts, attr: str
    ) -> list[tuple[FunctionFacts, cst.Attribute]]:
        """Uses of ``self.attr`` outside ``__init__``, not counting calls whose result is discarded."""
        refs = self.index.attr_refs.get((id(klass), attr), [])
        return [(fn, node) for fn, node in refs if id(node) not in self.index.bare_calls]

    def is_bare_call(self, call: cst.Call) -> bool:
        return id(call) in self.index.bare_calls

    def returns(self, fn: FunctionFacts) -> list[cst.Return]:
        return self.index.returns.get(id(fn), [])

    def has_heads(self, fn: FunctionFacts | None) -> bool:
        """Whether the code splits into several heads, so that head_dim differs from d_model.

        A head-dim name anywhere counts (``head_size`` given to a single-head class still
        differs from the model width); a head count counts only once it is stored or used,
        since ``num_heads=1`` asserted in ``__init__`` leaves one head as wide as the model.
        """
        if fn is None:
            return False
        used: set[str] = set(fn.params) | set(fn.assignments)
        declared: set[str] = set()
        if fn.owner is not None:
            used |= set(fn.owner.attributes)
            init = fn.owner.methods.get("__init__")
            declared = set(init.params) if init is not None else set()
        return any(name_quantity(n) in {"num_heads", "head_dim"} for n in used) or any(
            name_quantity(n) == "head_dim" for n in declared
        )

    # -- projections, head splits and merges ---------------------------------------

    def is_projection_call(self, call: cst.Call, fn: FunctionFacts | None) -> bool:
        """A learned linear map: a projection module, F.linear, addmm, or ``x @ self.W``."""
        attr = self_attribute(call.func)
        owner = fn.owner if fn is not None else None
        if attr is not None:
            if owner is not None and attr in owner.methods:
                return False
            return self.module_kind(owner, attr) is None or self.is_projection_module(owner, attr)
        # The Annotated Transformer's style: ``self.linears[-1](x)``, and
        # ``lin(x) for lin, x in zip(self.linears, (query, key, value))``.
        container = self_attribute(call.func.value) if type(call.func) is cst.Subscript else None
        if container is not None:
            return self._is_module_container(owner, container)
        if type(call.func) is cst.Name and fn is not None:
            return call.func.value in self._modules_iterated(fn)
        func = self.facts.canonical(call.func) or ""
        if func in {
            "torch.nn.functional.linear",
            "torch.addmm",
            "torch.nn.functional.conv1d",
            "torch.nn.functional.conv2d",
        }:
            return True
        operands = self.product_operands(call)
        return bool(operands) and any(self_attribute(_base(o)) for o in operands)

    def provenance(
        self, expr: cst.BaseExpression, fn: FunctionFacts | None, seen: set[int] | None = None
    ) -> tuple[bool, list[str]]:
        """(whether a learned projection is on some path to ``expr``, the raw inputs reached)."""
        seen = set() if seen is None else seen
        if id(expr) in seen or fn is None or len(seen) > 80:
            return False, []
        seen.add(id(expr))
        if type(expr) is cst.Name:
            raw = [expr.value] if expr.value in fn.params and expr.value != "self" else []
            projected = False
            for value, vfn in self.values(expr, fn):
                p, r = self.provenance(value, vfn, seen)
                projected, raw = projected or p, raw + r
            return projected, raw
        if type(expr) is cst.Subscript:
            return self.provenance(expr.value, fn, seen)
        if type(expr) is cst.Attribute:
            if self_attribute(expr) is not None or expr.attr.value in {"shape", "dtype", "device"}:
                return False, []
            return self.provenance(expr.value, fn, seen)
        if type(expr) is cst.BinaryOperation:
            if type(expr.operator) is cst.MatrixMultiply and (
                self_attribute(_base(expr.left)) or self_attribute(_base(expr.right))
            ):
                return True, []
            return _merge(self.provenance(expr.left, fn, seen), self.provenance(expr.right, fn, seen))
        if type(expr) in (cst.Tuple, cst.List):
            result: tuple[bool, list[str]] = (False, [])
            for element in expr.elements:
                result = _merge(result, self.provenance(element.value, fn, seen))
            return result
        if type(expr) is cst.Call:
            return self._call_provenance(expr, fn, seen)
        return False, []

    def _call_provenance(self, call: cst.Call, fn: FunctionFacts, seen: set[int]) -> tuple[bool, list[str]]:
        if self.is_projection_call(call, fn):
            return True, []
        result: tuple[bool, list[str]] = (False, [])
        if type(call.func) is cst.Attribute and self_attribute(call.func) is None:
            result = self.provenance(call.func.value, fn, seen)
            if method_name(call) not in {"matmul", "bmm", "mul", "add", "masked_fill"}:
                return result
        for arg in positional(call):
            if type(arg) in (
                cst.Name, cst.Call, cst.Subscript, cst.BinaryOperation, cst.List, cst.Tuple, cst.Attribute
            ):
                result = _merge(result, self.provenance(arg, fn, seen))
        return result

    def splits(self, fn: FunctionFacts) -> list[tuple[cst.Call, cst.BaseExpression]]:
        """Where ``fn`` splits a (b, s, d) tensor into heads: (the call, the tensor split)."""
        return self._reshapes(fn, _is_split)

    def merges(self, fn: FunctionFacts) -> list[tuple[cst.Call, cst.BaseExpression]]:
        """Where ``fn`` merges heads back into (b, s, d): (the call, the tensor merged)."""
        return self._reshapes(fn, _is_merge)

    def _reshapes(self, fn: FunctionFacts, test) -> list[tuple[cst.Call, cst.BaseExpression]]:
        found = []
        owner = fn.owner
        for call in fn.calls:
            tensor = test(call, self)
            if tensor is not None:
                found.append((call, tensor))
                continue
            attr = self_attribute(call.func)
            helper = owner.methods.get(attr) if owner is not None and attr else None
            if helper is None or helper is fn or len(helper.params) < 2:
                continue
            args = positional(call)
            param = helper.params[1]
            if args and any(type(t) is cst.Name and t.value == param for _, t in self._reshapes_here(helper, test)):
                found.append((call, args[0]))
        return found

    def _reshapes_here(self, fn: FunctionFacts, test) -> list[tuple[cst.Call, cst.BaseExpression]]:
        found = []
        for call in fn.calls:
            tensor = test(call, self)
            if tensor is not None:
                found.append((call, _base(tensor)))
        return found

    def feeds_attention(self, node: cst.CSTNode, fn: FunctionFacts) -> bool:
        """Whether the value of ``node`` (a call of ``fn``) becomes q, k or v with no learned
        projection in between: an operand of a matrix product or an argument of an attention
        function (SDPA, ``attention_interface``, ``eager_attention_forward``). Patchify and
        feature reshapes, ALiBi slopes, and states that a Linear projects afterwards
        (wav2vec2-conformer rotates hidden states before ``linear_q``) are not."""
        return id(node) in self._attention_lineage(fn)

    def _attention_lineage(self, fn: FunctionFacts) -> dict[int, cst.CSTNode]:
        """Every node the q, k and v of ``fn`` are computed from (by id), up to 4000 of them,
        walked back once per function: what a projection or a softmax reads is not q, k or v."""
        found = self._lineages.get(id(fn))
        if found is not None:
            return found
        stack: list[cst.CSTNode] = list(self._attention_inputs(fn))
        seen: dict[int, cst.CSTNode] = {}
        while stack and len(seen) < 4000:
            expr = stack.pop()
            if id(expr) in seen:
                continue
            seen[id(expr)] = expr
            if type(expr) is cst.Call and (self.is_projection_call(expr, fn) or self.softmax(expr, fn)):
                continue
            if type(expr) is cst.Name:
                stack.extend(v for v, _ in self.values(expr, fn))
            else:
                stack.extend(_value_parts(expr))
        self._lineages[id(fn)] = seen
        return seen

    def _attention_inputs(self, fn: FunctionFacts) -> list[cst.BaseExpression]:
        """q, k and v of ``fn``: the operands of the q·kᵀ products that reach a softmax, the
        other operand of a product with those weights (v), and the positional arguments of
        attention calls. A softmax over learned logits (a weighted sum of layers) is none."""
        found: list[cst.BaseExpression] = []
        weights: set[int] = set()
        for call in fn.calls:
            softmax = self.softmax(call, fn)
            pipeline = self.pipeline(softmax, fn) if softmax is not None else None
            if pipeline is not None and pipeline.products:
                found.extend(pipeline.operands)
                weights.add(id(call))
            callee = (self.facts.canonical(call.func) or "").rsplit(".", 1)[-1]
            if callee in SDPA or _ATTENTION_CALL.search(callee):
                found.extend(positional(call))
        if weights:
            for node in _walk_expression(fn.node.body):
                operands = self.product_operands(node)
                if operands is not None and len(operands) == 2:
                    first, second = operands
                    if self._computed_from(first, weights, fn):
                        found.append(second)
                    elif self._computed_from(second, weights, fn):
                        found.append(first)
        return found

    def _computed_from(self, expr: cst.BaseExpression, targets: set[int], fn: FunctionFacts) -> bool:
        """Whether one of the nodes ``targets`` is in the near lineage of ``expr``."""
        queue, seen = deque([expr]), {id(expr)}
        while queue and len(seen) < 200:
            current = queue.popleft()
            if id(current) in targets:
                return True
            parts = [v for v, _ in self.values(current, fn)] if type(current) is cst.Name else _value_parts(current)
            for part in parts:
                if id(part) not in seen:
                    seen.add(id(part))
                    queue.append(part)
        return False

    def reaches_attention(self, expr: cst.BaseExpression, fn: FunctionFacts) -> bool:
        return self.reaches_product(expr, fn) or any(
            (self.facts.canonical(c.func) or "") in SDPA for c in fn.calls
        )


def of(context: FileContext) -> Semantics:
    """The Semantics of a file, built once and shared by every rule."""
    return context.shared(_build)


def _build(context: FileContext) -> Semantics:
    return Semantics(context.module, context.facts)


# -- helpers --------------------------------------------------------------------


def einsum_key_axis(spec: str) -> tuple[int | None, int | None] | None:
    """Where the key axis is in the output of a q·kᵀ einsum, as (index from the front,
    index from the back): the one output letter that only the second operand (k) has.
    ``'v b ... d, l b ... d -> v l b ...'`` gives (1, None). None when it is not clear."""
    inputs, arrow, output = spec.replace(" ", "").partition("->")
    operands = inputs.split(",")
    if not arrow or len(operands) != 2:
        return None
    first, second = (set(o.replace("...", "")) for o in operands)
    tokens = re.findall(r"\.\.\.|[A-Za-z]", output)
    keys = [i for i, t in enumerate(tokens) if t in second and t not in first]
    if len(keys) != 1:
        return None
    (position,) = keys
    ellipsis = tokens.index("...") if "..." in tokens else None
    front = position if ellipsis is None or position < ellipsis else None
    back = position - len(tokens) if ellipsis is None or position > ellipsis else None
    return front, back



def parenthesized(module: cst.Module, node: cst.BaseExpression) -> bool:
    """Whether parentheses group ``node`` (``dim=(1)``): libcst keeps them in ``lpar``, a tree
    built from ``ast`` (``fast_tree``) reads them from the text."""
    read = getattr(module, "parenthesized", None)
    return read(node) if read is not None else bool(node.lpar)


def short_code(module: cst.Module, node: cst.CSTNode) -> str:
    """``node``'s code, for a message: stripped, and cut at 80 characters."""
    text = module.code_for_node(node).strip()
    return text if len(text) <= 80 else text[:77] + "..."


def _count_axes(side: str) -> int:
    return len(re.findall(r"\([^)]*\)|[A-Za-z_][A-Za-z0-9_]*|\.\.\.", side))


def _is_big_literal(node: cst.CSTNode) -> bool:
    """A literal like 10000 or 1e9: the magnitude of an additive mask's fill."""
    return type(node) in (cst.Integer, cst.Float) and abs(number_value(node)) >= 1e4  # type: ignore[arg-type]


def _walk_expression(expr: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``expr`` and the sub-expressions its value is made of, without entering lambdas or
    nested scopes. The condition of ``a if cond else b`` and the module or function called
    (``self.pos_embed`` in ``self.pos_embed(q)``, whose constructor arguments are not its
    output) are not part of the value."""
    stack, readers = [expr], subtree.READERS
    while stack:
        node = stack.pop()
        yield node
        kind = type(node)
        if kind is cst.Lambda or kind is cst.FunctionDef:
            continue
        if kind is cst.Attribute:
            if self_attribute(node) is None:
                stack.append(node.value)
            continue
        if kind is cst.IfExp:
            stack.extend((node.body, node.orelse))
            continue
        if kind is cst.Call and (type(node.func) is cst.Name or self_attribute(node.func)):
            stack.extend(node.args)
            continue
        stack.extend(readers[kind](node))


_LAYOUT_METHODS = {
    "view", "reshape", "permute", "transpose", "expand", "repeat", "flatten", "unflatten", "unsqueeze",
    "squeeze", "split", "chunk", "unbind", "narrow", "contiguous", "to", "type", "type_as", "size",
}


def _value_parts(expr: cst.CSTNode) -> list[cst.CSTNode]:
    """The tensors ``expr``'s value is computed from, one level down: not the sizes a view
    takes, not a tensor's ``.shape``, not an IfExp condition, not the callee of a call."""
    if type(expr) is cst.Attribute:
        keep = self_attribute(expr) is None and expr.attr.value not in {"shape", "dtype", "device"}
        return [expr.value] if keep else []
    if type(expr) is cst.Subscript:
        return [expr.value]
    if type(expr) is cst.Call:
        arguments = [a.value for a in expr.args]
        if type(expr.func) is cst.Attribute and self_attribute(expr.func) is None:
            method = expr.func.attr.value
            return [expr.func.value] + ([] if method in _LAYOUT_METHODS else arguments)
        return arguments
    if type(expr) is cst.BinaryOperation:
        return [expr.left, expr.right]
    if type(expr) is cst.UnaryOperation:
        return [expr.expression]
    if type(expr) is cst.IfExp:
        return [expr.body, expr.orelse]
    if type(expr) in (cst.Tuple, cst.List):
        return [e.value for e in expr.elements]
    return []


def _is_tf_style_mask_term(other: cst.BaseExpression, sem: Semantics) -> bool:
    """``- 1e4 * (1 - mask)``: the additive half of the old TF multiplicative idiom."""
    code = sem.module.code_for_node(other)
    nodes = list(_walk_expression(other))
    complement = any(  # ``(1 - b)``: GPT-1's ``w * b + -1e4 * (1 - b)`` names its mask ``b``
        type(n) is cst.BinaryOperation and type(n.operator) is cst.Subtract and number(n.left) == 1
        for n in nodes
    )
    return (
        (bool(_MASK_NAME.search(code)) or complement)
        and any(
            _is_big_literal(n) or is_infinite(n, sem.facts)  # type: ignore[arg-type]
            for n in nodes
        )
        and "(" in code
    )


_BINARY_DOC = re.compile(r"\b(0|1|0/1|1/0|True|False|bool|boolean|binary|zeros?|ones?)\b")


def _docstring_says_binary(fn: FunctionFacts, param: str) -> str | None:
    doc = fn.node.get_docstring() or ""
    for line in doc.splitlines():
        if (
            re.search(rf"\b{re.escape(param)}\b", line)
            and _BINARY_DOC.search(line)
            and "-inf" not in line
            and "additive" not in line.lower()
        ):
            return f"the docstring says {line.strip()!r}"
    return None


def located(rule: cst.BatchableCSTVisitor, *nodes: cst.CSTNode) -> cst.CSTNode:
    """The first of ``nodes`` that is in the parsed tree (facts builds a few synthetic nodes)."""
    from libcst.metadata import PositionProvider

    for node in nodes:
        if rule.get_metadata(PositionProvider, node, None) is not None:
            return node
    return nodes[-1]


def _base(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``self.W`` for ``self.W.t()`` or ``self.W.T``: what a method chain starts from."""
    while True:
        if (
            type(expr) is cst.Call
            and type(expr.func) is cst.Attribute
            and not self_attribute(expr.func)
        ):
            expr = expr.func.value
        elif type(expr) is cst.Attribute and self_attribute(expr) is None:
            expr = expr.value
        else:
            return expr


def _merge(a: tuple[bool, list[str]], b: tuple[bool, list[str]]) -> tuple[bool, list[str]]:
    return a[0] or b[0], a[1] + b[1]


def _shape_args(call: cst.Call) -> list[cst.BaseExpression]:
    args = positional(call)
    if len(args) == 1 and type(args[0]) in (cst.Tuple, cst.List):
        return [e.value for e in args[0].elements]
    return args


def _rearrange_sides(call: cst.Call, sem: Semantics) -> tuple[str, str] | None:
    if not (sem.facts.canonical(call.func) or "").endswith("rearrange"):
        return None
    args = positional(call)
    if len(args) < 2:
        return None
    pattern = string_value(args[1])
    if not pattern or "->" not in pattern:
        return None
    left, right = pattern.split("->", 1)
    return left, right


def _is_split(call: cst.Call, sem: Semantics) -> cst.BaseExpression | None:
    method = method_name(call)
    if method in {"view", "reshape"} and type(call.func) is cst.Attribute and len(_shape_args(call)) >= 4:
        return call.func.value
    if method == "unflatten" and type(call.func) is cst.Attribute:
        return call.func.value
    sides = _rearrange_sides(call, sem)
    if sides is not None and "(" in sides[0] and _count_axes(sides[1]) > _count_axes(sides[0]):
        return positional(call)[0]
    return None


def _is_merge(call: cst.Call, sem: Semantics) -> cst.BaseExpression | None:
    method = method_name(call)
    if type(call.func) is not cst.Attribute and _rearrange_sides(call, sem) is None:
        return None
    if method in {"view", "reshape"} and len(_shape_args(call)) == 3:
        return call.func.value  # type: ignore[union-attr]
    if method == "flatten":
        start = positional(call)[0] if positional(call) else keyword(call, "start_dim")
        if start is not None and number(start) in (2.0, -2.0):
            return call.func.value  # type: ignore[union-attr]
    sides = _rearrange_sides(call, sem)
    if sides is not None and "(" in sides[1] and _count_axes(sides[1]) < _count_axes(sides[0]):
        return positional(call)[0]
    return None


_ROLES = (
    (
        "qkv",
        re.compile(
            r"(^|_)(qkv|c_attn|in_proj|in_proj_weight|wqkv|to_qkv|query_key_value|att_proj)($|_)", re.I
        ),
    ),
    ("kv", re.compile(r"(^|_)(kv|to_kv|wkv)($|_)", re.I)),
    ("q", re.compile(r"(^|_)(q|query|queries|wq|to_q)($|_)", re.I)),
    ("k", re.compile(r"(^|_)(k|key|keys|wk|to_k)($|_)", re.I)),
    ("v", re.compile(r"(^|_)(v|value|values|wv|to_v)($|_)", re.I)),
    (
        "out",
        re.compile(
            r"(^|_)(o|out|output|proj|projection|dense|wo|c_proj|to_out|fc|out_proj|o_proj)($|_)", re.I
        ),
    ),
)


def projection_role(attr: str) -> str | None:
    """ "q", "k", "v", "qkv", "kv" or "out" from an attribute's name (``W_o`` -> "out")."""
    name = attr.lower()
    for prefix in ("w_", "linear_", "lin_"):
        if name.startswith(prefix) and len(name) > len(prefix):
            name = name[len(prefix) :]
    for role, pattern in _ROLES:
        if pattern.search(name):
            return role
    return None
