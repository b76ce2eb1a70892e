"""Which recorded layer is Q, K, V and the output projection, judged by what each layer read.

Names lie (``self.proj``, ``c_attn``, ``W``), data flow does not: the child
records, for every projection call, whether it read the query, the key, the
value, the single input of self-attention, another projection's output, or
something else (the attention context), and which of its output columns reach
the scores (``inside.score_flow``). From that this module proposes the
assignments consistent with the shapes; the parent keeps the one whose
reference matches. When none matches (a module with a mistake), the first
assignment is the one its diagnosis reads: the one whose value rows are the
columns that do not reach the scores (a fused layer's own q/k/v layout), then the
one whose layer names agree with their roles.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from attncheck.dynamic.reference.mha import Linear, Projections


@dataclass(frozen=True)
class Layer:
    """One recorded projection call (weights in ``nn.Linear`` layout)."""

    name: str
    read: str
    linear: Linear
    to_scores: torch.Tensor | None = None  # bool per output column: it reaches the scores (None: unknown)

    @property
    def out_features(self) -> int:
        return self.linear.weight.shape[0]


@dataclass(frozen=True)
class Assignment:
    """Projections to give the reference, with a description for the check detail."""

    projections: Projections
    kv_heads: int
    description: str


def layers_from(facts: Sequence[Mapping[str, Any]], tensors: Mapping[str, torch.Tensor]) -> list[Layer]:
    """The recorded calls, in call order, with their weights."""
    layers = []
    for index, fact in enumerate(facts):
        bias = tensors.get(f"layer{index}/bias")
        flow = tensors.get(f"layer{index}/to_scores")
        layer = Layer(fact["name"], fact["read"], Linear(tensors[f"layer{index}/weight"], bias))
        layers.append(layer if flow is None else replace(layer, to_scores=flow.bool()))
    return layers


def _slice(layer: Layer, start: int, stop: int) -> Linear:
    bias = layer.linear.bias[start:stop] if layer.linear.bias is not None else None
    return Linear(layer.linear.weight[start:stop], bias)


def _split(layer: Layer, d_q: int, d_kv: int) -> tuple[Linear, Linear, Linear]:
    """A fused qkv layer cut into its three projections (q first, as everyone lays it out)."""
    return _slice(layer, 0, d_q), _slice(layer, d_q, d_q + d_kv), _slice(layer, d_q + d_kv, d_q + 2 * d_kv)


def _output(layers: Sequence[Layer], d_q: int) -> Layer | None:
    """The last layer that read something other than an input or a projection: the context."""
    consumers = [layer for layer in layers if layer.read == "other" and layer.linear.weight.shape[1] == d_q]
    return consumers[-1] if consumers else None


def _kv_dims(d_model: int, heads: int) -> list[int]:
    head_dim = d_model // heads
    return [head_dim * kv for kv in range(heads, 0, -1) if heads % kv == 0]


def assignments(layers: Sequence[Layer], d_model: int, heads: int) -> list[Assignment]:
    """Every assignment of Q, K, V, O consistent with what the layers read and their shapes.

    The heads are as wide as the query projection makes them: SAM's attention projects to a downsampled
    width (``hidden_size // attention_downsample_rate``) and its output projection reads that width.
    """
    readers = {role: [layer for layer in layers if layer.read == role] for role in ("query", "key", "value", "kv", "x")}
    inner = readers["query"][0].out_features if readers["query"] else d_model
    out_layer = _output(layers, inner)
    o = out_layer.linear if out_layer else None
    o_text = f"O={out_layer.name}" if out_layer else "no output projection"
    head_dim = max(inner // heads, 1)
    found: list[Assignment] = []
    disagreements: list[int] = []

    def add(q: Linear | None, k: Linear | None, v: Linear | None, text: str, values: ValueRows = ()) -> None:
        d_kv = k.weight.shape[0] if k is not None else inner
        kv_heads = max(d_kv // head_dim, 1)
        if heads % kv_heads:  # no grouping of the query heads has K/V this wide (6 KV heads for 4)
            return
        found.append(Assignment(Projections(q, k, v, o), kv_heads, f"{text}, {o_text}"))
        disagreements.append(_flow_disagreement(values))

    if readers["query"] or readers["key"] or readers["value"] or readers["kv"]:
        q = readers["query"][0] if readers["query"] else None
        kv_layers = readers["key"] + readers["value"] if (readers["key"] or readers["value"]) else readers["kv"]
        if kv_layers or len(readers["query"]) < 2:
            _cross(q, kv_layers, readers, add)
        else:  # every projection reads the query: K and V derived from it, as in self-attention (ATT101)
            _self(readers["query"], d_model, heads, add)
    else:
        _self(readers["x"], d_model, heads, add)
    if not found:
        found.append(Assignment(Projections(None, None, None, o), heads, f"no Q/K/V projection found, {o_text}"))
        disagreements.append(0)
    # stable: among assignments the flow cannot tell apart, the order of the names stays
    return [found[i] for i in sorted(range(len(found)), key=disagreements.__getitem__)]


ValueRows = Sequence[tuple[Layer, torch.Tensor]]
"""The layers an assignment reads, each with a bool per output row: True where it is taken as a value."""


def _flow_disagreement(values: ValueRows) -> int:
    """How many rows of the layers whose flow the child recorded contradict the assignment: a value
    row that reaches the scores, or a query or key row that does not (0 when no flow is known)."""
    return sum(
        int((layer.to_scores == rows).sum())
        for layer, rows in values
        if layer.to_scores is not None and layer.to_scores.shape == rows.shape
    )


def _rows(layer: Layer, start: int = 0, stop: int | None = None) -> torch.Tensor:
    """A bool per output row of ``layer``: True on rows [start, stop) (none with ``stop=0``)."""
    rows = torch.zeros(layer.out_features, dtype=torch.bool)
    rows[start:stop] = True
    return rows


def _cross(q: Layer | None, kv_layers: list[Layer], readers: Mapping[str, list[Layer]], add) -> None:
    q_linear = q.linear if q else None
    q_text = f"Q={q.name}" if q else "no Q projection"
    if readers["key"] or readers["value"]:
        k = readers["key"][0] if readers["key"] else None
        v = readers["value"][0] if readers["value"] else None
        add(
            q_linear,
            k.linear if k else None,
            v.linear if v else None,
            f"{q_text}, K={k.name if k else 'none'}, V={v.name if v else 'none'}",
        )
        return
    if len(kv_layers) >= 2:
        for k, v in itertools.permutations(kv_layers[:2]):
            add(q_linear, k.linear, v.linear, f"{q_text}, K={k.name}, V={v.name}")
    elif len(kv_layers) == 1:
        fused = kv_layers[0]
        half = fused.out_features // 2
        add(
            q_linear,
            _slice(fused, 0, half),
            _slice(fused, half, 2 * half),
            f"{q_text}, KV={fused.name} (fused)",
        )


_ROLE_NAMES = {"q": re.compile(r"(^|[._])(w_?)?q(uery)?(_proj)?$|query", re.IGNORECASE),
               "k": re.compile(r"(^|[._])(w_?)?k(ey)?(_proj)?$|key", re.IGNORECASE),
               "v": re.compile(r"(^|[._])(w_?)?v(alue)?(_proj)?$|value", re.IGNORECASE)}


def _by_names(orders: Iterable[tuple[Layer, Layer, Layer]]) -> list[tuple[Layer, Layer, Layer]]:
    """Orders whose layer names agree with their roles first.

    The reference decides which assignment is right; names only break the tie when
    none matches (a module with a mistake), so that its diagnosis uses the likely one.
    """

    def agreement(order: tuple[Layer, Layer, Layer]) -> int:
        return -sum(bool(_ROLE_NAMES[role].search(layer.name)) for role, layer in zip("qkv", order, strict=True))

    return sorted(orders, key=agreement)


def _self(readers: list[Layer], d_model: int, heads: int, add) -> None:
    if len(readers) >= 3:
        for q, k, v in _by_names(itertools.permutations(readers[:3])):
            if q.out_features == d_model and k.out_features == v.out_features:
                values = ((q, _rows(q, stop=0)), (k, _rows(k, stop=0)), (v, _rows(v)))
                add(q.linear, k.linear, v.linear, f"Q={q.name}, K={k.name}, V={v.name}", values)
    elif len(readers) == 2:
        for single, fused in itertools.permutations(readers):
            if single.out_features == d_model and fused.out_features % 2 == 0:
                half = fused.out_features // 2
                first, second = _slice(fused, 0, half), _slice(fused, half, 2 * half)
                values = ((single, _rows(single, stop=0)), (fused, _rows(fused, half)))
                add(single.linear, first, second, f"Q={single.name}, KV={fused.name} (fused)", values)
                if half == single.out_features:  # TNT's qk and v (an MQA's narrow kv is no qk)
                    values = ((fused, _rows(fused, stop=0)), (single, _rows(single)))
                    add(first, second, single.linear, f"QK={fused.name} (fused), V={single.name}", values)
    elif len(readers) == 1:
        fused = readers[0]
        for d_kv in _kv_dims(d_model, heads):
            if fused.out_features == d_model + 2 * d_kv:
                q, k, v = _split(fused, d_model, d_kv)
                values = ((fused, _rows(fused, d_model + d_kv)),)
                add(q, k, v, f"QKV={fused.name} (fused, split {d_model}/{d_kv}/{d_kv})", values)
        if fused.out_features == 3 * d_model:
            q, k, v = _per_head(fused, heads)
            values = ((fused, _per_head_values(fused, heads)),)
            add(q, k, v, f"QKV={fused.name} (fused per head: q, k, v of each head in turn, as GPT-NeoX)", values)


def _per_head_values(layer: Layer, heads: int) -> torch.Tensor:
    """The value rows of a fused layer laid out head by head: the third part of each head's q, k, v."""
    rows = torch.zeros(heads, 3, layer.out_features // (3 * heads), dtype=torch.bool)
    rows[:, 2] = True
    return rows.flatten()


def _per_head(layer: Layer, heads: int) -> tuple[Linear, Linear, Linear]:
    """A fused layer whose rows run head by head, each head's q, k, v together (GPT-NeoX, Bloom)."""
    weight = layer.linear.weight
    rows = weight.reshape(heads, 3, -1, weight.shape[1])
    bias = layer.linear.bias.reshape(heads, 3, -1) if layer.linear.bias is not None else None
    return tuple(  # type: ignore[return-value]
        Linear(rows[:, part].reshape(-1, weight.shape[1]), None if bias is None else bias[:, part].reshape(-1))
        for part in range(3)
    )
