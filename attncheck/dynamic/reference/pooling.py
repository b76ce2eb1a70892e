"""Attention pooling: which queries a pooling module attends with, its class token's or its own learned ones.

CaiT's ``ClassAttn`` and VOLO's ``ClassAttention`` attend with the class token alone
(``self.q(x[:, 0])``, ``self.q(x[:, :1])``) over every token, and return one position: the
first row of self-attention. Such a module is exact cross-attention whose queries are some rows
of its input (:class:`QueryRows`). timm's ``AttentionPoolLatent`` and x-transformers'
``AttentionPool`` attend with a parameter of their own (:class:`LearnedQueries`): the child records
that the query projection read that parameter and sends it, so it is the query. Either way the
reference gives ``mha`` those queries (the mistakes the diagnosis knows then apply unchanged). A
module that pools with anything else (the mean of its tokens) matches neither; it stays skipped as
pooling the reference does not model (``unmodelled.own_queries``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch

from attncheck.dynamic.binding.weights import Layer


class Queries(Protocol):
    """The queries a pooling module attends with, read from its input or its parameters."""

    count: int

    @property
    def text(self) -> str: ...

    def of(self, tokens: torch.Tensor) -> torch.Tensor:
        """The (b, count, d) queries for a (b, s, d) input."""
        ...

    def keep_rows(self, keep: torch.Tensor) -> torch.Tensor:
        """The rows of a (b, h, q, k) keep mask planned for every token that these queries use."""
        ...

    def layers(self, layers: Sequence[Layer]) -> list[Layer]:
        """The recorded projections with the reads the weight assignment expects for these queries."""
        ...


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

    def layers(self, layers: Sequence[Layer]) -> list[Layer]:
        return list(layers)  # the query projection reads the input, as in self-attention


@dataclass(frozen=True)
class LearnedQueries:
    """Queries that are a parameter of the module (``name``), the same for every batch element."""

    name: str
    queries: torch.Tensor  # (count, d)

    @property
    def count(self) -> int:
        return self.queries.shape[0]

    def of(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.queries.to(tokens.dtype).unsqueeze(0).expand(tokens.shape[0], -1, -1)

    def keep_rows(self, keep: torch.Tensor) -> torch.Tensor:
        return keep if keep.shape[-2] == 1 else keep[..., :1, :]  # a key mask: the same keys for every query

    @property
    def text(self) -> str:
        return f"pooling: the module's own {self.count} learned queries ({self.name}) query the input"

    def layers(self, layers: Sequence[Layer]) -> list[Layer]:
        """The projection of the parameter reads the query; those of the input read the keys and values."""
        reads = {f"param:{self.name}": "query", "x": "kv"}
        return [replace(layer, read=reads.get(layer.read, layer.read)) for layer in layers]


def pooled_rows(softmax: Sequence[dict[str, Any]] | None, got: Sequence[int], expected: Sequence[int]) -> int | None:
    """How many queries of its own a module attends with: its output has another number of positions
    than its (b, s, d) input, each a softmax row over every key (fewer: pooling; more: a Perceiver's
    latents outnumbering the probe's tokens); None otherwise."""
    if len(got) != 3 or len(expected) != 3 or got[0] != expected[0] or got[2] != expected[2]:
        return None
    if not 0 < got[1] != expected[1]:
        return None
    rows = [call["shape"] for call in softmax or () if len(call["shape"]) >= 2]
    return got[1] if any(tuple(shape[-2:]) == (got[1], expected[1]) for shape in rows) else None


def choices(count: int, tokens: int, layers: Sequence[Mapping[str, Any]], tensors: Mapping[str, torch.Tensor]
            ) -> list[Queries]:
    """The queries to try: the input's leading class token and its last token (where ``count`` is fewer than
    the input's ``tokens``), then each parameter a recorded projection read (its ``read`` is ``param:<name>``)
    that holds ``count`` queries of that projection's width."""
    found: list[Queries] = [QueryRows(count, "first"), QueryRows(count, "last")] if count < tokens else []
    for layer in layers:
        name = layer["read"].removeprefix("param:")
        value = tensors.get(f"declared/param/{name}") if layer["read"].startswith("param:") else None
        if value is not None and value.numel() == count * layer["in"]:
            found.append(LearnedQueries(name, value.reshape(count, layer["in"])))
    return found
