"""Runs inside the child: which output columns of each projection flow into the attention scores.

A fused q/k/v projection lays its rows out in one of two ways: contiguously (all of q, then k,
then v: Falcon, GPT-2) or head by head (q, k, v of each head in turn: BLOOM, GPT-NeoX). Shapes and
names cannot tell them apart, and a module with a mistake matches neither reference, so the
diagnosis would read it in the first layout tried. Data flow tells: the gradient of the scores
(a softmax's input, or the query and key given to SDPA) with respect to a projection's output is
non-zero on the columns that become queries and keys and exactly zero on those that become
values. The recorder asks once, at the first such call, while the graph of the forward is alive.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

SEED = 0  # the random weights of the scores: a fixed draw, so that a run is repeatable


def columns_to_scores(scores: Sequence[torch.Tensor], outputs: Mapping[int, torch.Tensor]) -> dict[int, torch.Tensor]:
    """For each projection output (by call index, features on the last axis) that the scores depend
    on, a bool per output column: True where that column reaches the scores. Empty without gradients."""
    operands = [t for t in scores if t.requires_grad and t.is_floating_point()]
    sources = {index: out for index, out in outputs.items() if out.requires_grad}
    if not operands or not sources:
        return {}
    generator = torch.Generator().manual_seed(SEED)
    # random weights, so that no column's contributions cancel in the sum
    total = sum(
        (t * torch.randn(t.shape, generator=generator, dtype=torch.float64).to(t.device, t.dtype)).sum()
        for t in operands
    )
    grads = torch.autograd.grad(total, list(sources.values()), retain_graph=True, allow_unused=True)
    found = {}
    for (index, out), grad in zip(sources.items(), grads, strict=True):
        if grad is None:  # the scores do not read this output at all
            found[index] = torch.zeros(out.shape[-1], dtype=torch.bool)
        elif grad.ndim >= 2:
            found[index] = (grad != 0).flatten(0, -2).any(dim=0).cpu()
    return found
