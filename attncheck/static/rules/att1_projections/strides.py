"""Which dims a ``.view`` merges, and whether a transpose separated them in memory.

``x.permute(...).view(...)`` raises "view size is not compatible with input
tensor's size and stride" only when the view must merge dims that are not
adjacent (in order) in memory. Merging dims that the permutation kept together
(``x.permute(0, 2, 3, 1).view(1, -1, c)`` merges h and w), splitting a dim,
adding a singleton or keeping the shape are all fine. This module reads the
literal transposes a tensor went through and the sizes a view asks for (``-1``
and names are sizes it cannot evaluate) and answers "merges separated dims",
"compatible" or "cannot tell". Nothing is evaluated and torch is never imported.
Node classes are tested exactly (``type(node) is cst.Call``), as in ``facts``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import libcst as cst

from attncheck.static.analysis.patterns import (
    TRANSPARENT_METHODS,
    Tracer,
    dim_role,
    einsum_output,
    literal_is,
    matmul_operands,
    method_name,
    receiver,
    shape_arguments,
)
from attncheck.static.facts import FunctionFacts, integer_value, self_attribute

# ``.contiguous()`` ends a walk (the layout is fresh there); ``.to``/``.clone``
# keep the transposed strides (``memory_format=torch.preserve_format``).
KEEPS_STRIDES = TRANSPARENT_METHODS - {"contiguous"}
# Dims at or beyond this are no tensor's (torch allows 64): read as unknown, not laid out.
MAX_RANK = 64
_SDPA = "torch.nn.functional.scaled_dot_product_attention"
_ELEMENTWISE = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide)

Verdict = Literal["separated", "compatible", "unknown"]


@dataclass(frozen=True)
class Step:
    """One transpose: ``swap`` (a, b), ``permute`` (dims), ``move`` (src, dst), ``reverse``, ``unknown``."""

    kind: Literal["swap", "permute", "move", "reverse", "unknown"]
    dims: tuple[int, ...] = ()

    def apply(self, order: list[int]) -> list[int] | None:
        """``order`` (memory position of each dim) after this step, None when it does not fit."""
        rank = len(order)
        if self.kind == "reverse":
            return order[::-1]
        if self.kind == "unknown" or any(not -rank <= d < rank for d in self.dims):
            return None
        dims = [d % rank for d in self.dims]
        if self.kind == "swap":
            a, b = dims
            order = list(order)
            order[a], order[b] = order[b], order[a]
            return order
        if self.kind == "move":
            order = list(order)
            order.insert(dims[1], order.pop(dims[0]))
            return order
        if sorted(dims) != list(range(rank)):
            return None
        return [order[d] for d in dims]

    def needed_rank(self) -> int:
        """The smallest rank the step's literal dims make sense for."""
        return max((d if d >= 0 else -d - 1 for d in self.dims), default=-1) + 1


@dataclass(frozen=True)
class Reordering:
    """The transposes between a contiguous tensor and the tensor a view reads.

    ``steps`` run innermost first; ``first`` is the outermost transpose, shown
    in messages; ``rank`` is the tensor's rank when something states it.
    """

    steps: tuple[Step, ...]
    first: cst.BaseExpression
    rank: int | None

    def memory_order(self, rank: int) -> list[int] | None:
        order: list[int] | None = list(range(rank))
        for step in self.steps:
            if order is None:
                return None
            order = step.apply(order)
        return order

    def needed_rank(self) -> int:
        return max(step.needed_rank() for step in self.steps)


def transpose_step(node: cst.BaseExpression, tracer: Tracer) -> tuple[Step, cst.BaseExpression] | None:
    """The step a transpose spelling makes and the tensor it reads; None for anything else.

    ``x.transpose(1, 2)``, ``torch.transpose(x, 1, 2)``, ``x.permute(0, 2, 1)``,
    ``x.permute([1, 0, 2])``, ``x.mT``, ``x.T``, ``x.t()``, ``x.movedim(1, 2)``.
    ``self.t(x)`` (a submodule named ``t``) is a call, not a transpose.
    """
    if type(node) is cst.Attribute and node.attr.value in ("T", "H"):
        return Step("reverse"), node.value
    if type(node) is cst.Attribute and node.attr.value in ("mT", "mH"):
        return Step("swap", (-2, -1)), node.value
    if type(node) is not cst.Call or self_attribute(node.func) is not None:
        return None
    canonical = tracer.facts.canonical(node.func) or ""
    functional = canonical in ("torch.transpose", "torch.permute", "torch.swapaxes", "torch.movedim")
    method = method_name(node)
    if functional:
        if not node.args:
            return None
        tensor, rest = node.args[0].value, node.args[1:]
        method = canonical.rsplit(".", 1)[-1]
    elif method in ("transpose", "permute", "swapaxes", "swapdims", "movedim", "t") and not canonical.startswith(
        "torch."
    ):
        tensor, rest = receiver(node), node.args
    else:
        return None
    if method == "t":
        return (Step("swap", (0, 1)), tensor) if not rest else None
    values = [a.value for a in rest if a.keyword is None and not a.star]
    if method == "permute" and len(values) == 1 and type(values[0]) in (cst.Tuple, cst.List):
        values = [e.value for e in values[0].elements]
    dims = tuple(_integer(v) for v in values)
    kind = {"permute": "permute", "movedim": "move"}.get(method, "swap")
    pair = len(values) == len(rest) == 2
    if None in dims or (kind != "permute" and not pair):
        return Step("unknown"), tensor
    return Step(kind, dims), tensor  # type: ignore[arg-type]


def reordering(node: cst.BaseExpression, tracer: Tracer, fn: FunctionFacts | None) -> Reordering | None:
    """The transposes ``node`` went through since it was last laid out contiguously, or None
    when its origin is no transpose.

    Follows names, ``self.`` attributes, the calls that keep strides and dropout;
    once a transpose is seen, also the left tensor of an elementwise operation
    (whose result keeps that operand's layout), so that a transpose undone
    after some arithmetic (``x.transpose(0, 1) * cos`` ... ``.transpose(0, 1)``)
    reads as the identity.
    """
    steps: list[Step] = []
    first: cst.BaseExpression | None = None
    permute_rank: int | None = None
    for _ in range(16):
        if type(node) is cst.Call and method_name(node) in KEEPS_STRIDES:
            node = receiver(node)
            continue
        if tracer.is_dropout(node, fn) and type(node) is cst.Call and node.args:
            node = node.args[0].value
            continue
        found = transpose_step(node, tracer)
        if found is not None:
            first = first if first is not None else node
            step, node = found
            steps.append(step)
            if step.kind == "permute" and permute_rank is None:
                permute_rank = len(step.dims)
            continue
        if steps and type(node) is cst.BinaryOperation and type(node.operator) in _ELEMENTWISE:
            node = node.right if _is_number(node.left) else node.left
            continue
        stepped = tracer.step(node, fn)
        if stepped is None:
            break
        node, fn = stepped
    if not steps or first is None:
        return None
    rank = permute_rank if permute_rank is not None else evident_rank(node, tracer, fn)
    return Reordering(tuple(reversed(steps)), first, rank)


def evident_rank(
    node: cst.BaseExpression, tracer: Tracer, fn: FunctionFacts | None, depth: int = 0
) -> int | None:
    """The rank a tensor evidently has: from the view/reshape/permute/unsqueeze that made it,
    an einsum's output, the operands of a matmul or of SDPA, or what a submodule was given."""
    if depth > 8:
        return None
    node, fn = tracer.origin(node, fn, through=KEEPS_STRIDES | {"contiguous"})
    found = transpose_step(node, tracer)
    if found is not None:
        step, inner = found
        return len(step.dims) if step.kind == "permute" else evident_rank(inner, tracer, fn, depth + 1)
    if type(node) is cst.BinaryOperation and type(node.operator) in _ELEMENTWISE:
        sides = [evident_rank(side, tracer, fn, depth + 1) for side in (node.left, node.right)]
        return max((r for r in sides if r is not None), default=None)
    if type(node) is not cst.Call:
        return None
    name = method_name(node)
    if name in ("view", "reshape"):
        sizes = shape_arguments(node)
        single_name = sizes is not None and len(sizes) == 1 and _integer(sizes[0]) is None
        return None if sizes is None or single_name else len(sizes)
    if name == "unsqueeze":
        inner_rank = evident_rank(receiver(node), tracer, fn, depth + 1)
        return inner_rank + 1 if inner_rank is not None else None
    output = einsum_output(node, tracer.facts)
    if output is not None:
        return None if "..." in output else len(output)
    operands = matmul_operands(node, tracer.facts)
    if operands is None and tracer.facts.canonical(node.func) == _SDPA and node.args:
        operands = (node.args[0].value,)
    if operands is not None:
        ranks = [evident_rank(o, tracer, fn, depth + 1) for o in operands]
        return max((r for r in ranks if r is not None), default=None)
    if self_attribute(node.func) is not None and len(node.args) == 1:
        return evident_rank(node.args[0].value, tracer, fn, depth + 1)  # a norm, a linear layer
    return None


# -- the view's side ------------------------------------------------------------------


@dataclass(frozen=True)
class _Size:
    """One size a view asks for: ``-1`` (rest), a literal 1, a product of ``width`` sizes, a name."""

    rest: bool = False
    one: bool = False
    width: int = 1
    model: bool = False  # named like d_model: heads × head_dim merged, when nothing says otherwise
    role: str | None = None


def _size(node: cst.BaseExpression) -> _Size:
    if literal_is(node, -1):
        return _Size(rest=True)
    if literal_is(node, 1):
        return _Size(one=True)
    factors = _factors(node)
    if len(factors) > 1:
        return _Size(width=max(1, sum(1 for f in factors if _integer(f) is None)))
    role = dim_role(node)
    return _Size(model=role == "model", role=role)


def _factors(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    if type(node) is cst.BinaryOperation and type(node.operator) is cst.Multiply:
        return _factors(node.left) + _factors(node.right)
    return [node]


def merge_groups(sizes: Sequence[_Size], rank: int, guess_model: bool = False) -> list[range] | None:
    """The runs of dims of a rank-``rank`` tensor that each size covers; None when ambiguous.

    As many sizes as dims (or more: literal 1s inserted, dims split) merge
    nothing. Fewer sizes merge: a product covers as many dims as it has
    factors, the one ``-1`` covers what is left. ``guess_model`` lets a
    d_model-like name stand for two dims when nothing else fills the rank.
    """
    if len(sizes) >= rank:
        products = any(s.width > 1 for s in sizes)
        return [range(i, i + 1) for i in range(rank)] if len(sizes) == rank or not products else None
    widths = [s.width for s in sizes]
    rests = [i for i, s in enumerate(sizes) if s.rest]
    if len(rests) > 1:
        return None
    fixed = sum(w for s, w in zip(sizes, widths, strict=True) if not s.rest)
    if rests:
        if rank - fixed < 1:
            return None
        widths[rests[0]] = rank - fixed
    elif fixed != rank:
        models = [i for i, s in enumerate(sizes) if s.model]
        if not guess_model or fixed + len(models) != rank:
            return None
        for i in models:
            widths[i] = 2
    groups, start = [], 0
    for width in widths:
        groups.append(range(start, start + width))
        start += width
    return groups


def _candidate_ranks(reordering: Reordering, sizes: Sequence[_Size]) -> list[int]:
    """The ranks to try: the known one, else the ones the view's sizes allow."""
    if reordering.rank is not None:
        return [reordering.rank]
    needed = reordering.needed_rank()
    fixed = sum(s.width + (1 if s.model else 0) for s in sizes if not s.rest)
    if any(s.rest for s in sizes):
        if _is_batch_seq_rest(sizes):
            return [max(needed, len(sizes) + 1)]  # (b, s, -1): the rest merges heads and head_dim
        low = max(needed, fixed + 1)
        return [low, low + 1, low + 2]
    if fixed == len(sizes):
        return []  # plain names and no rank: a split, the same shape or a merge, nobody can tell
    return [max(needed, fixed)]


def _is_batch_seq_rest(sizes: Sequence[_Size]) -> bool:
    """``view(b, s, -1)``: named batch and sequence sizes, then the rest: the classic head merge."""
    *named, last = sizes
    return last.rest and len(named) >= 1 and all(s.role in ("batch", "seq") for s in named)


def view_verdict(reordering: Reordering, shape: Sequence[cst.BaseExpression] | None) -> Verdict:
    """Whether a view of the reordered tensor to ``shape`` must merge dims that are not adjacent in memory."""
    if shape is None:
        return "unknown"
    sizes = [_size(s) for s in shape]
    verdicts: set[Verdict] = set()
    for rank in _candidate_ranks(reordering, sizes):
        order = reordering.memory_order(rank)
        if order is None:
            verdicts.add("unknown")
            continue
        separated = {i for i in range(rank - 1) if order[i + 1] != order[i] + 1}
        if not separated:
            verdicts.add("compatible")
            continue
        groups = merge_groups(sizes, rank, guess_model=reordering.rank is None)
        if groups is None:
            verdicts.add("unknown")
        elif any(i in separated for group in groups for i in group[:-1]):
            verdicts.add("separated")
        else:
            verdicts.add("compatible")
    return verdicts.pop() if len(verdicts) == 1 else "unknown"


def _integer(node: cst.BaseExpression) -> int | None:
    return integer_value(node, bound=MAX_RANK)


def _is_number(node: cst.BaseExpression) -> bool:
    return type(node) in (cst.Integer, cst.Float) or _integer(node) is not None

