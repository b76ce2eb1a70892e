"""The residual and post-norm some attention classes apply themselves: ``norm(attention + input)``.

TVP's ``TvpAttention`` and the BERT-like classes that fold ``SelfOutput`` into the attention return
``self.layer_norm(self.dense(context) + hidden_states)``. The binding reads that the forward ends so
(``source_facts.post_norm_residual``); the child describes the module's token norms as it reads
its weights (``variant_facts``: kind, eps, weight, bias). The reference then computes attention
as usual and applies the module's own norm to it plus the input, so attention is still what is
checked, and a mistake inside it is still named (the mutants get the same hook).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from attncheck.dynamic.reference.variant_fit import normalise

PostHook = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""(attention output (b, q, d), the query input (b, q, d)) -> the module's output."""


def hooks(
    declared: Mapping[str, Any] | None, tensors: Mapping[str, torch.Tensor], width: int
) -> list[tuple[str, PostHook]]:
    """(layer name, hook) for each token norm of the module as wide as its output, in the module's order."""
    found = []
    for name, fact in ((declared or {}).get("post_norms") or {}).items():
        weight = tensors.get(f"declared/post/{name}/weight")
        if weight is None or weight.numel() != width:
            continue
        bias = tensors.get(f"declared/post/{name}/bias")

        def hook(out: torch.Tensor, query: torch.Tensor, fact: Mapping[str, Any] = fact,
                 weight: torch.Tensor = weight, bias: torch.Tensor | None = bias) -> torch.Tensor:
            return normalise(out + query, fact, weight, bias)

        found.append((name, hook))
    return found
