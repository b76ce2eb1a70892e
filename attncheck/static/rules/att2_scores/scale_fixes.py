"""The ``--fix`` edits of ATT201 (wrong scale), offered only where the head dim is in scope.

A fix needs an expression that holds the head dimension where the scores are
computed: a parameter or earlier local (``d_k``, ``head_dim = C // n_head``)
of that function, else a ``self.`` attribute of its class (``self.head_dim``),
recognised by ``Semantics.quantity`` as the head dim. Without one there is no
fix: guessing ``q.size(-1)`` is wrong for unsplit (batch, seq, d_model) tensors.
A scale applied twice needs no name: the repeated divisor is deleted.

Only a pipeline with a single scale factor is rewritten, so the result is
exactly one ``1/sqrt(head_dim)``: a divisor becomes ``math.sqrt(HD)`` (adding
``import math`` when missing), a multiplier becomes ``HD ** -0.5``. Unscaled
scores get `` / math.sqrt(HD)`` after their one product.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from attncheck.findings import Edit
from attncheck.static import edits
from attncheck.static.analysis.results import Factor, Pipeline, Term
from attncheck.static.analysis.semantics import Semantics
from attncheck.static.facts import FunctionFacts

if TYPE_CHECKING:
    from attncheck.static.rule import Rule


def head_dim_in_scope(rule: Rule, sem: Semantics, fn: FunctionFacts, anchor: cst.CSTNode) -> str | None:
    """Source text naming the head dim at ``anchor`` in ``fn``, or None."""
    here = edits.span(rule, anchor)
    if here is None:
        return None
    for name in fn.params:
        if name != "self" and _is_head_dim(sem, cst.Name(name), fn):
            return name
    for name, values in fn.assignments.items():
        written = edits.span(rule, values[0]) if len(values) == 1 else None
        if written is not None and written[1] <= here[0] and _is_head_dim(sem, cst.Name(name), fn):
            return name
    if fn.owner is not None:
        for attr in fn.owner.attributes:
            if _is_head_dim(sem, cst.Attribute(cst.Name("self"), cst.Name(attr)), fn):
                return f"self.{attr}"
    return None


def _is_head_dim(sem: Semantics, expr: cst.BaseExpression, fn: FunctionFacts) -> bool:
    found = sem.quantity(expr, fn)
    return found is not None and found.kind == "head_dim"


def replace_factor(rule: Rule, sem: Semantics, pipeline: Pipeline, factor: Factor) -> tuple[Edit, ...]:
    """The pipeline's one scale factor replaced by the head-dim scale."""
    if len(pipeline.factors) != 1 or pipeline.factors[0] is not factor or pipeline.scale_argument:
        return ()
    head_dim = head_dim_in_scope(rule, sem, factor.fn, factor.node)
    if head_dim is None:
        return ()
    if not factor.divides:
        return edits.complete(edits.replace(rule, factor.value, f"{head_dim} ** -0.5"))
    math = edits.module_name(rule, "math")
    if math is None:
        return ()
    name, imports = math
    return edits.complete(edits.replace(rule, factor.value, f"{name}.sqrt({head_dim})"), *imports)


def drop_repeated_factor(rule: Rule, pipeline: Pipeline, terms: list[Term]) -> tuple[Edit, ...]:
    """Scores scaled by 1/sqrt(head_dim) twice: delete the scale written on the scores.

    Only for exactly two factors of ``x / v`` or ``x * v`` form on the scores
    side (the first the walk records), each one head-dim scale; the one applied
    to q or k before the product stays, and ``q = q`` is never left behind.
    """
    halves = len(terms) == 2 and all(abs(term.power + 0.5) < 1e-9 for term in terms)
    if not halves or len(pipeline.factors) != 2 or pipeline.scale_argument:
        return ()
    factor = pipeline.factors[0]
    node = factor.node
    if not isinstance(node, cst.BinaryOperation) or node.right is not factor.value:
        return ()
    left, whole = edits.span(rule, node.left), edits.span(rule, node)
    if left is None or whole is None:
        return ()
    return (Edit(left[1], whole[1], ""),)


def add_scale(rule: Rule, sem: Semantics, pipeline: Pipeline) -> tuple[Edit, ...]:
    """`` / math.sqrt(HD)`` after the one product of unscaled scores.

    The product's span excludes its own parentheses, so appending divides the
    product itself; a product followed by ``.method()``, ``[...]`` or a call is
    wrapped in parentheses first.
    """
    if len(pipeline.products) != 1 or pipeline.factors or pipeline.scale_argument:
        return ()
    product = pipeline.products[0]
    head_dim = head_dim_in_scope(rule, sem, pipeline.fn, product)
    math = edits.module_name(rule, "math")
    where = edits.span(rule, product)
    if head_dim is None or math is None or where is None:
        return ()
    name, imports = math
    text = rule.context.source.text
    follows = text[where[1] :].lstrip(" \t")[:1]
    divide = f" / {name}.sqrt({head_dim})"
    if follows in (".", "[", "("):
        return (Edit(where[0], where[0], "("), Edit(where[1], where[1], divide + ")"), *imports)
    return (Edit(where[1], where[1], divide), *imports)
