"""Attention pooling by class tokens: which input rows a pooling module queries with.

CaiT's ``ClassAttn`` and VOLO's ``ClassAttention`` attend with the class token alone
(``self.q(x[:, 0])``, ``self.q(x[:, :1])``) over every token, and return one position: the
first row of self-attention. Such a module is exact cross-attention whose queries are some rows
of its input, so the reference models it by giving ``mha`` those rows as the query (the mistakes
the diagnosis knows then apply unchanged). A module that pools with queries of its own (learned
queries, a mean) matches no rows of its input; it stays skipped as pooling the reference does
not model (``unmodelled.own_queries``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class QueryRows:
    """The rows of the input a pooling module queries with: the first or the last ``count`` tokens."""

    count: int
    end: str  # "first" (CaiT, VOLO: the class token leads) or "last" (a summary token appended)

    def of(self, tokens: torch.Tensor) -> torch.Tensor:
        """Those rows of a (b, s, d) input."""
        return tokens[:, : self.count] if self.end == "first" else tokens[:, -self.count :]

    def keep_rows(self, keep: torch.Tensor) -> torch.Tensor:
        """The rows of a (b, h, q, k) keep mask planned for every token that these queries use."""
        if keep.shape[-2] == 1:
            return keep
        return keep[..., : self.count, :] if self.end == "first" else keep[..., -self.count :, :]

    @property
    def text(self) -> str:
        token = "token" if self.count == 1 else f"{self.count} tokens"
        return f"pooling: the {self.end} {token} of the input alone query (class-token attention)"


def pooled_rows(softmax: Sequence[dict[str, Any]] | None, got: Sequence[int], expected: Sequence[int]) -> int | None:
    """How many positions a pooling module returns: fewer than the input has, each a softmax row over
    every key; None when the output is no pooling of a (b, s, d) input."""
    if len(got) != 3 or len(expected) != 3 or got[0] != expected[0] or got[2] != expected[2]:
        return None
    if not 0 < got[1] < expected[1]:
        return None
    rows = [call["shape"] for call in softmax or () if len(call["shape"]) >= 2]
    return got[1] if any(tuple(shape[-2:]) == (got[1], expected[1]) for shape in rows) else None


def choices(count: int) -> list[QueryRows]:
    """The rows to try, the leading class token first."""
    return [QueryRows(count, "first"), QueryRows(count, "last")]
