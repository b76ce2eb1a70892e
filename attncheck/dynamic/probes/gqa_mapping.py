"""Which KV head does each query head use? The head-dependency analysis (ATT401).

The runner perturbs one KV head at a time (its slice of the K/V projection) and
records which query heads' outputs move. Grouped-query attention is correct when
query head h depends on KV head h // (Hq/Hkv) (HF ``repeat_kv``, SDPA
``enable_gqa``, flash-attn); expanding K/V with ``.repeat`` tiles them instead, so
query head h uses KV head h % Hkv, which pretrained GQA weights do not expect.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

Mapping = Literal["grouped", "tiled", "other"]
# A query head "moved" by more than this share of the experiment's largest move: a dependent head moves
# by about the noise added to its KV head (order 1), an independent one by the module's float32
# rounding, amplified by the inverted output projection that reads heads apart (up to ~1e-4).
MOVED_SHARE = 1e-3


def grouped_mapping(num_heads: int, num_kv_heads: int) -> torch.Tensor:
    """(Hkv, Hq) bool: KV head j feeds query heads j*g .. j*g + g - 1."""
    group = num_heads // num_kv_heads
    return torch.arange(num_heads).unsqueeze(0) // group == torch.arange(num_kv_heads).unsqueeze(1)


def tiled_mapping(num_heads: int, num_kv_heads: int) -> torch.Tensor:
    """(Hkv, Hq) bool: KV head j feeds query heads j, j + Hkv, j + 2 Hkv, ..."""
    return torch.arange(num_heads).unsqueeze(0) % num_kv_heads == torch.arange(num_kv_heads).unsqueeze(1)


def dependency_matrix(base: torch.Tensor, perturbed: Sequence[torch.Tensor], tol: float) -> torch.Tensor:
    """(Hkv, Hq) bool: which query heads moved when each KV head was perturbed.

    ``base`` holds the outputs per query head with query heads on axis 1
    (e.g. (b, Hq, q, dh)); ``perturbed[j]`` the same after perturbing KV head j. A head moved
    when its change exceeds ``tol`` and ``MOVED_SHARE`` of the largest change of that experiment.
    """
    changes = [(p - base).abs().transpose(0, 1).flatten(1).amax(dim=1) for p in perturbed]
    return torch.stack([change > max(tol, MOVED_SHARE * float(change.max())) for change in changes])


@dataclass(frozen=True)
class GqaVerdict:
    """The mapping from query heads to KV heads that a module implements."""

    mapping: Mapping
    code: str | None  # "ATT401" for tiling
    ambiguous: bool  # grouped and tiled coincide for these head counts (Hkv = 1 or Hkv = Hq)
    message: str


def name_mapping(changed: torch.Tensor) -> GqaVerdict:
    """Name the mapping behind a (Hkv, Hq) dependency matrix."""
    if changed.dim() != 2 or changed.shape[0] == 0 or changed.shape[1] % changed.shape[0]:
        shape = tuple(changed.shape)
        raise ValueError(f"expected a (Hkv, Hq) matrix with Hkv dividing Hq, got shape {shape}")
    kv_heads, heads = changed.shape
    changed = changed.to(torch.bool)
    grouped, tiled = grouped_mapping(heads, kv_heads), tiled_mapping(heads, kv_heads)
    ambiguous = bool(torch.equal(grouped, tiled))
    group = heads // kv_heads
    if torch.equal(changed, grouped):
        return GqaVerdict("grouped", None, ambiguous, f"query head h uses KV head h // {group}, as expected")
    if torch.equal(changed, tiled):
        example = ", ".join(str(h) for h in range(1, heads, kv_heads))
        return GqaVerdict(
            "tiled",
            "ATT401",
            ambiguous,
            f"query head h uses KV head h % {kv_heads} (perturbing KV head 1 moves query heads {example}): "
            f"K/V were expanded with .repeat (tiling); pretrained GQA weights pair query head h with KV head "
            f"h // {group}: use k.repeat_interleave({group}, dim=1) (HF repeat_kv)",
        )
    feeds = "; ".join(
        f"KV head {j} -> query heads {[h for h in range(heads) if changed[j, h]]}" for j in range(kv_heads)
    )
    return GqaVerdict(
        "other",
        None,
        ambiguous,
        f"the query heads depend on the KV heads neither grouped (h // {group}) nor tiled "
        f"(h % {kv_heads}): {feeds}",
    )
