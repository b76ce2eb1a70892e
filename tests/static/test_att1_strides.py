"""ATT106's stride reasoning against torch itself: an error only where ``.view`` really
raises, nothing where it really works (a warning may go either way)."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attncheck.findings import Severity
from attncheck.static.rules.att1_projections.view_after_transpose import ViewAfterTranspose
from tests.conftest import lint_text

SIZES = (2, 3, 5, 7)  # distinct primes: no merge of two dims equals a third dim by accident


@st.composite
def permuted_views(draw):
    """A rank-2..4 tensor, a permutation, and a view that groups consecutive permuted dims."""
    rank = draw(st.integers(2, 4))
    order = draw(st.permutations(range(rank)))
    cuts = sorted(draw(st.sets(st.integers(1, rank - 1), max_size=rank - 1)))
    bounds = [0, *cuts, rank]
    groups = [order[a:b] for a, b in itertools.pairwise(bounds)]
    rest = draw(st.none() | st.integers(0, len(groups) - 1))
    return rank, order, groups, rest


def _snippet(rank: int, order: list[int], groups: list[list[int]], rest: int | None, spelling: str) -> str:
    names = ", ".join(f"n{i}" for i in range(rank))
    sizes = ", ".join(
        "-1" if index == rest else " * ".join(f"n{d}" for d in group) for index, group in enumerate(groups)
    )
    return f"def f(x, {names}):\n    y = x.{spelling}\n    return y.view({sizes})\n"


def _torch_view_works(rank: int, order: list[int], groups: list[list[int]]) -> bool:
    x = torch.empty(SIZES[:rank]).permute(*order)
    shape = [1] * len(groups)
    for index, group in enumerate(groups):
        for d in group:
            shape[index] *= SIZES[d]
    try:
        x.view(*shape)
    except RuntimeError:
        return False
    return True


def _verdict(text: str) -> Severity | None:
    found = [f.severity for f in lint_text(text, rules=[ViewAfterTranspose])]
    return found[0] if found else None


@settings(max_examples=80, deadline=None)
@given(case=permuted_views())
def test_permute_then_view_is_an_error_exactly_when_torch_raises(case) -> None:
    rank, order, groups, rest = case
    text = _snippet(rank, list(order), groups, rest, f"permute({', '.join(map(str, order))})")
    works = _torch_view_works(rank, list(order), groups)
    # the permute states the rank, so the rule must always be sure
    assert _verdict(text) == (None if works else Severity.ERROR), text


@settings(max_examples=60, deadline=None)
@given(case=permuted_views(), pair=st.tuples(st.integers(0, 3), st.integers(0, 3)))
def test_transpose_of_unknown_rank_never_contradicts_torch(case, pair) -> None:
    rank, _, groups, rest = case
    a, b = (d % rank for d in pair)
    order = list(range(rank))
    order[a], order[b] = order[b], order[a]
    groups = [[order[d] for d in range(start, start + len(g))] for start, g in _starts(groups)]
    text = _snippet(rank, order, groups, rest, f"transpose({a}, {b})")
    verdict = _verdict(text)
    works = _torch_view_works(rank, order, groups)
    if verdict is Severity.ERROR:
        assert not works, text
    if verdict is None:
        assert works, text


def _starts(groups: list[list[int]]):
    start = 0
    for group in groups:
        yield start, group
        start += len(group)


@pytest.mark.parametrize(
    ("text", "severity"),
    [
        ("def f(x, b, s, h, d):\n    return x.transpose(1, 2).view(b, s, h * d)\n", Severity.ERROR),
        ("def f(x, b, s, d_model):\n    return x.transpose(1, 2).view(b, s, d_model)\n", Severity.ERROR),
        ("def f(x, b, s):\n    return x.transpose(1, 2).view(b, s, -1)\n", Severity.ERROR),
        ("def f(x):\n    return x.transpose(1, 2).view(4, 5, -1)\n", Severity.WARNING),
        ("def f(x, n):\n    return x.transpose(0, 1).view(n, -1).t().view(-1)\n", Severity.ERROR),
        ("def f(x, b, c):\n    return x.transpose(1, 2).transpose(1, 2).view(b, c, -1)\n", None),
        ("def f(x, n):\n    return x.mT.mT.view(n, -1)\n", None),
        ("def f(x, b, h, w):\n    return x.permute(0, 2, 3, 1).view(b, h * w, -1)\n", None),
        ("def f(x, k, b, c):\n    return x.transpose(k, -1).view(b, c, -1)\n", Severity.WARNING),
    ],
)
def test_view_verdicts(text: str, severity: Severity | None) -> None:
    assert _verdict(text) == severity
