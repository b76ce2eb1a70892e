"""Channel attention: the softmax runs over (head_dim, head_dim) scores, one weight per pair of channels.

DaViT's ``ChannelAttention`` and XCiT's ``XCA`` (cross-covariance attention) transpose attention:
per head, the scores are ``aᵀ b`` summed over the tokens, a (dh, dh) matrix, and every token's
output channels are a softmax-weighted mix of its channels of ``c``. They differ in which
projection plays which part (DaViT: ``kᵀ v`` applied to ``q``; XCiT: ``qᵀ k`` applied to ``v``)
and in the temperature: a declared scale (1/sqrt(head_dim)), 1/sqrt(tokens) (DaViT's
``dynamic_scale``), or XCiT's learned per-head ``temperature`` on l2-normalised q and k. The
reference reads each from the module (its projections, its ``scale``, its ``temperature``
parameter), so :func:`forms` lists only the readings those admit, and ``ChannelForm.mistakes`` the
mistakes a channel attention can make within them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch.nn import functional as F  # noqa: N812

from attncheck.dynamic.reference.forms import Mistake, project
from attncheck.dynamic.reference.mha import Projections, merge_heads, split_heads

PARTS = "qkv"


@dataclass(frozen=True)
class ChannelForm:
    """One reading of channel attention: which projections are a, b (scores aᵀ b) and c (mixed), and the
    temperature: a number, or a (heads,) tensor on l2-normalised a and b (``normalised``)."""

    order: tuple[int, int, int]
    heads: int
    scale: float
    temperature: torch.Tensor | None = None
    normalised: bool = False
    softmax_axis: int = -1  # -1: over b's channels, as the module means; -2 is the softmax-axis mistake
    name: str = ""

    def __call__(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, proj: Projections,
        keep: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The module's output on batch-first (b, n, d) inputs (``keep`` has no meaning here: see ``masked``)."""
        projected = [project(layer, x) for layer, x in ((proj.q, query), (proj.k, key), (proj.v, value))]
        a, b, c = (split_heads(projected[i], self.heads) for i in self.order)  # (b, h, n, dh)
        if self.normalised:
            a, b = F.normalize(a, dim=-2), F.normalize(b, dim=-2)  # along the tokens
        factor: Any = self.scale
        if self.temperature is not None:
            factor = self.temperature.reshape(1, -1, 1, 1).to(torch.float64)
        scores = torch.einsum("bhnc,bhne->bhce", a, b) * factor  # (b, h, dh, dh)
        weights = torch.softmax(scores, dim=self.softmax_axis)
        out = torch.einsum("bhce,bhne->bhnc", weights, c)
        return project(proj.o, merge_heads(out))

    @property
    def masked(self) -> str:
        return "channel attention has no (query, key) scores for a key mask to hide"

    @property
    def text(self) -> str:
        a, b, c = (PARTS[i] for i in self.order)
        return f"channel attention: softmax({a}ᵀ{b} · {self.name}) over channels, applied to {c}"

    def mistakes(self, width: int) -> list[Mistake]:
        """The softmax over the other channel axis (ATT202); the scores left unscaled or scaled by the model
        width (ATT201), where the form has a scale of its own."""
        found = [
            Mistake("ATT202", "softmax-over-a-channels", "takes the softmax over the channels of a (dim=-2) instead "
                    "of those of b", "take the softmax over the last axis of the (dh, dh) scores (dim=-1).",
                    replace(self, softmax_axis=-2)),
        ]
        if self.normalised:  # its temperature is no scale the code could have got wrong
            return found
        if not math.isclose(self.scale, 1.0):
            found.append(Mistake("ATT201", "channel-scores-unscaled", f"leaves the (dh, dh) scores unscaled instead "
                                 f"of scaling them by {self.name}", "multiply the scores by the scale the module "
                                 "declares.", replace(self, scale=1.0)))
        if not math.isclose(self.scale, width**-0.5):
            found.append(Mistake("ATT201", "channel-scale-1/sqrt(d_model)", f"scales the scores by 1/sqrt(d_model "
                                 f"{width}) instead of {self.name}", "scale by 1/sqrt(head_dim), the channels one "
                                 "head mixes.", replace(self, scale=width**-0.5)))
        return found


def channel_heads(softmax: Sequence[Mapping[str, Any]] | None, width: int, q_len: int, k_len: int) -> int | None:
    """The head count of a channel attention: its softmax runs over (b, h, dh, dh) scores with h · dh the
    width, and none over (query, key) ones. The softmax gives the heads, whatever the module names them
    (DaViT's ``groups``); None for token attention."""
    shapes = [tuple(call["shape"]) for call in softmax or () if len(call["shape"]) == 4]
    if any(shape[-2:] == (q_len, k_len) for shape in shapes):
        return None
    for _, heads, rows, cols in shapes:
        if rows == cols and heads * rows == width and rows not in (q_len, k_len):
            return heads
    return None


def forms(declared_facts: Mapping[str, Any] | None, tensors: Mapping[str, torch.Tensor], heads: int, width: int,
          tokens: int) -> list[ChannelForm]:
    """Every reading the module admits (its declared facts and tensors as the child read them): each
    assignment of q, k, v to the parts, times its temperatures (the declared ``scale``, else
    1/sqrt(head_dim) or 1/sqrt(tokens); a declared ``temperature`` on normalised a and b, else 1 on them)."""
    declared = (declared_facts or {}).get("scalars", {}).get("scale")
    head_dim = width // heads
    temperature = tensors.get("declared/temperature")
    scales: list[tuple[str, float]] = []
    if isinstance(declared, (int, float)) and not isinstance(declared, bool) and declared > 0:
        scales.append((f"the declared scale {declared:.4g}", float(declared)))
    scales += [
        (f"1/sqrt(head_dim {head_dim})", head_dim**-0.5),
        (f"1/sqrt(tokens {tokens})", tokens**-0.5),
    ]
    temperatures = [("the module's temperature on l2-normalised channels", temperature)] if temperature is not None \
        else [("1 on l2-normalised channels", None)]
    found = []
    for order in itertools.permutations(range(3)):
        found += [ChannelForm(order, heads, scale, name=name) for name, scale in scales]
        found += [ChannelForm(order, heads, 1.0, t, normalised=True, name=name) for name, t in temperatures]
    return found
