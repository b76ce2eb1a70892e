"""Constructs the reference does not model, recognised so a target is skipped with why, never ATT903.

ATT903 says "the output differs and no known mistake explains it". That is only fair when
the reference could have matched: when the module shows a construct outside the variant
vocabulary (MLA latent KV, differential attention..., read in the child by
``inside.variant_facts``), attends across another axis than the tokens (channel attention:
its softmax runs over (head_dim, head_dim) scores), or scales its scores on purpose by a
factor the reference does not take (DeBERTa's 1/sqrt(head_dim * 3)), a mismatch says nothing
about a mistake. :func:`reason` is the one place that answers, asked only after every known
mistake failed to explain the output.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from attncheck.dynamic.reference.tolerance import max_error

Reference = Callable[[float], torch.Tensor]  # the reference output with a given score scale


@dataclass(frozen=True)
class Rescaled:
    """The plain output and the references it may be a rescaled version of (one per weight mapping)."""

    output: torch.Tensor
    references: Iterable[Reference]
    head_dim: int
    tol: float


def reason(facts: Mapping[str, Any], q_len: int, k_len: int, rescaled: Rescaled | None = None) -> str:
    """Why the reference cannot model this target ('' when it could have): a declared construct it
    does not model, else a softmax over another axis, else (when ``rescaled`` is given) a scale set
    on purpose. Every skip of a mismatch goes through here, so all say why in the same words."""
    why = declared(facts.get("declared")) or other_axis(facts.get("softmax"), q_len, k_len)
    if why or rescaled is None:
        return why or ""
    for reference in rescaled.references:
        factor = fitted_scale(rescaled.output, reference, rescaled.head_dim, rescaled.tol)
        if factor is not None:
            return scale_text(factor, rescaled.head_dim)
    return ""


def declared(facts: Mapping[str, Any] | None) -> str | None:
    """The constructs a module shows that the reference does not model, worded for a skip."""
    constructs = (facts or {}).get("unmodelled") or []
    if not constructs:
        return None
    return (
        f"the module shows {', '.join(constructs)}, which the float64 reference does not model; "
        "the mismatch is not evidence of a mistake"
    )


def other_axis(softmax: Sequence[dict[str, Any]] | None, q_len: int, k_len: int) -> str | None:
    """Why the module is no token attention: no softmax it took runs over (query, key) scores."""
    calls = [call for call in softmax or () if len(call["shape"]) >= 2]
    if not calls or any(tuple(call["shape"][-2:]) == (q_len, k_len) for call in calls):
        return None
    shape = tuple(calls[0]["shape"])
    return (
        f"its softmax runs over {shape} scores, not over (query, key) = ({q_len}, {k_len}): attention across "
        "another axis (e.g. channels), which the reference does not model"
    )


def own_queries(softmax: Sequence[dict[str, Any]] | None, got: Sequence[int], expected: Sequence[int]) -> str | None:
    """Why an output of another length is no mistake: the module attends with queries of its own (attention
    pooling with learned queries), its softmax rows being the output's positions; or it pools to fewer
    positions through a softmax out of sight (``nn.MultiheadAttention``'s, then ``out[:, 0]``) or through one
    score per token (additive pooling: a softmax over the tokens and no (token, token) scores); None otherwise."""
    if len(got) != 3 or len(expected) != 3 or got[0] != expected[0] or got[2] != expected[2] or got[1] == expected[1]:
        return None
    calls = [call for call in softmax or () if call["shape"]]
    fewer = got[1] < expected[1]
    per_token = any(tuple(call["shape"][-2:]) == (expected[1], expected[1]) for call in calls)
    over_tokens = any(call["shape"][call.get("dim", -1)] == expected[1] for call in calls)
    rows = any(len(call["shape"]) >= 2 and call["shape"][-2] == got[1] for call in calls)
    if rows or (fewer and not calls) or (fewer and over_tokens and not per_token):
        return own_queries_text(got[1])
    return None


def own_queries_text(count: int) -> str:
    """Why a pooling module whose queries are neither rows of its input nor a parameter it reads is skipped."""
    return (
        f"the module attends with {count} queries of its own (attention pooling by queries that are neither its "
        "class token nor a parameter it projects, e.g. the mean of its tokens), not one per input token: the "
        "reference does not model them"
    )


def fitted_scale(output: torch.Tensor, reference: Reference, head_dim: int, tol: float) -> float | None:
    """The factor c for which the output is the reference scaled by c / sqrt(head_dim), when one fits.

    A coarse log-spaced search, then a golden-section refinement around the best point.
    """
    standard = 1.0 / math.sqrt(head_dim)

    def error(log_c: float) -> float:
        return max_error(output, reference(standard * math.exp(log_c)))

    grid = [math.log(0.05) + i * (math.log(20.0) - math.log(0.05)) / 48 for i in range(49)]
    best = min(range(len(grid)), key=lambda i: error(grid[i]))
    low, high = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(60):
        a, b = high - ratio * (high - low), low + ratio * (high - low)
        if error(a) < error(b):
            high = b
        else:
            low = a
    log_c = (low + high) / 2
    if error(log_c) > tol or abs(log_c) < 1e-6:
        return None
    return math.exp(log_c)


def scale_text(factor: float, head_dim: int) -> str:
    """Why a target whose scale fits another factor is skipped."""
    return (
        f"the output is attention scaled by {factor:.4g}/sqrt(head_dim) (head_dim {head_dim}), a scale the code "
        f"sets on purpose (1/sqrt({head_dim / factor**2:.4g})), which the reference does not model"
    )
