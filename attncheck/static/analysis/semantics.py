"""What attention code means, for the rules that judge it.

Rules ask semantic questions the syntax alone cannot answer: is this product
q·kᵀ? does this name hold the head dim or the sequence length? is this a
softmax, and over which dim? which ``self.`` attributes are Linear or Dropout
modules, and does forward ever use them? ``Semantics`` answers them once per
file, on top of the light data flow of ``facts``, through one module per question
(``flow``, ``modules``, ``shapes``, ``masks``, ``scores``, ``scales``, ``heads``, each a class
of queries over the one before it); it holds the per-file caches and never imports torch.

The flow is deliberately flow-insensitive: a name assigned several times
stands for all its values at once, so a rule sees every way a tensor can be
built and stays quiet when any of them is legitimate.

Node classes are tested exactly (``type(node) is cst.Call``), as in ``facts``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from attncheck.static.analysis.flow import _Index, _IndexBuilder, _Layout
from attncheck.static.analysis.heads import HeadQueries
from attncheck.static.analysis.results import Pipeline, Softmax
from attncheck.static.facts import FileFacts, FunctionFacts

if TYPE_CHECKING:
    from attncheck.static.context import FileContext


class Semantics(HeadQueries):
    """The semantic view of one file; get it with ``of(context)``. A facade: it answers through the
    question modules it inherits and holds only the per-file caches they share."""

    def __init__(self, module: cst.Module, facts: FileFacts) -> None:
        self.module = module
        self.facts = facts
        self.index = _Index(facts)
        _IndexBuilder(facts, self.index).build(module)
        self._reaches: dict[int, bool] = {}
        self._pipelines: dict[int, Pipeline | None] = {}
        self._orders: dict[int, _Layout] = {}
        self._products: dict[int, dict[type, list[tuple[str, str]]]] = {}  # per class: a * b, a // b
        self._values: dict[tuple[int, int], list[tuple[cst.BaseExpression, FunctionFacts | None]]] = {}
        self._lineages: dict[int, dict[int, cst.CSTNode]] = {}  # per function: _attention_lineage
        self._multiplications_in: dict[int, dict[int, cst.BinaryOperation]] = {}  # per function
        self._iterated: dict[int, set[str]] = {}  # per function: _modules_iterated
        self._softmaxes: dict[tuple[int, int], tuple[cst.Call, Softmax | None]] = {}


def of(context: FileContext) -> Semantics:
    """The Semantics of a file, built once and shared by every rule."""
    return context.shared(_build)


def _build(context: FileContext) -> Semantics:
    return Semantics(context.module, context.facts)
