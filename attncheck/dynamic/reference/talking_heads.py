"""Talking-heads attention (CaiT's ``TalkingHeadAttn``): the scores mixed across heads before and after the softmax.

Shazeer et al.'s talking heads project the (b, h, q, k) scores along the heads axis with an (h, h)
linear layer before the softmax (CaiT's ``proj_l``) and the weights with another after it
(``proj_w``), each applied as ``layer(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)``. The child records
both as projections (their weights, and that they read neither input), so the reference takes them
from there: :func:`forms` lists the readings the recorded (h, h) layers admit, in call order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from attncheck.dynamic.binding.weights import Layer
from attncheck.dynamic.reference.forms import Mistake, project
from attncheck.dynamic.reference.mha import Linear, Projections, merge_heads, split_heads


def mix(x: torch.Tensor, layer: Linear) -> torch.Tensor:
    """(b, h, q, k) mixed across the heads axis by an (h, h) layer, as CaiT applies it."""
    return layer(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


@dataclass(frozen=True)
class TalkingHeads:
    """Attention whose scaled scores are mixed by ``pre`` before the softmax and its weights by ``post`` after."""

    heads: int
    pre: Linear | None
    post: Linear | None
    names: str
    scale: float | None = None  # None: 1/sqrt(head_dim)
    softmax_axis: int = -1

    def __call__(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, proj: Projections,
        keep: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The output on batch-first inputs; ``keep`` hides keys after the mix before the softmax (x-transformers)."""
        q, k, v = (split_heads(project(layer, x), self.heads)
                   for layer, x in ((proj.q, query), (proj.k, key), (proj.v, value)))
        scale = q.shape[-1] ** -0.5 if self.scale is None else self.scale
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale
        if self.pre is not None:
            scores = mix(scores, self.pre)
        if keep is not None:
            scores = scores.masked_fill(~keep, float("-inf"))
        weights = torch.softmax(scores, dim=self.softmax_axis).nan_to_num(0.0)
        if self.post is not None:
            weights = mix(weights, self.post)
        return project(proj.o, merge_heads(torch.einsum("bhqk,bhkd->bhqd", weights, v)))

    @property
    def text(self) -> str:
        return f"talking heads: {self.names}"

    @property
    def masked(self) -> str:
        return ""

    def mistakes(self, width: int) -> list[Mistake]:
        """The scores scaled by 1/sqrt(d_model) or unscaled (ATT201); the softmax over the heads or the
        queries (ATT202)."""
        head_dim = width // self.heads
        found = [
            Mistake("ATT201", "scale-1/sqrt(d_model)", f"scales the scores by 1/sqrt(d_model {width}) instead of "
                    f"1/sqrt(head_dim {head_dim})", "scale by 1/sqrt(head_dim).", replace(self, scale=width**-0.5)),
            Mistake("ATT201", "scores-unscaled", f"leaves the scores unscaled instead of scaling them by "
                    f"1/sqrt(head_dim {head_dim})", "scale by 1/sqrt(head_dim).", replace(self, scale=1.0)),
        ]
        found += [
            Mistake("ATT202", f"softmax-over-{axis_name}", f"takes the softmax over the {axis_name} (dim={axis}) "
                    "instead of the keys", "take the softmax over the keys (dim=-1).", replace(self, softmax_axis=axis))
            for axis, axis_name in ((1, "heads"), (2, "queries"))
        ]
        return found


def forms(layers: Sequence[Layer], width: int) -> list[TalkingHeads]:
    """The readings of the (h, h) layers that read neither input, h a head count of the width: the first
    before the softmax and the second after it (CaiT), or one alone before or after."""
    mixers = [
        layer for layer in layers
        if layer.read == "other" and layer.linear.weight.shape[0] == layer.linear.weight.shape[1] > 1
        and width % layer.linear.weight.shape[0] == 0 and layer.linear.weight.shape[0] < width
    ]
    if not mixers:
        return []
    heads = mixers[0].linear.weight.shape[0]
    if len(mixers) >= 2 and mixers[1].linear.weight.shape[0] == heads:
        first, second = mixers[0], mixers[1]
        return [TalkingHeads(heads, first.linear, second.linear, f"{first.name} before the softmax, {second.name} "
                             "after it")]
    only = mixers[0]
    return [
        TalkingHeads(heads, only.linear, None, f"{only.name} before the softmax"),
        TalkingHeads(heads, None, only.linear, f"{only.name} after the softmax"),
    ]
