"""What the analyses answer: the quantities, scale terms, softmaxes, factors, masks and pipelines they return.

Part of the analyses behind ``semantics.Semantics`` (see its docstring); it never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst

from attncheck.static.facts import FunctionFacts

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
