"""Mutated references: the known attention mistakes as knobs of one reference.

Each catalogue mistake is a setting of one knob of :func:`mutated_mha`, a single
pipeline (project, split, rotate, score, scale, mask, softmax, merge, project)
whose default knobs reproduce ``reference.mha`` exactly. A :class:`Mutant` is one
knob setting with its catalogue code and a learner-level explanation; two mutants
that turn different knobs compose into a module with both mistakes, which is how
:mod:`attncheck.dynamic.diagnosis.diagnose` explains two mistakes at once.

Not every slip is a mutant: masking after the softmax and then renormalising by
the row sum is mathematically the masked softmax (only fully masked rows differ,
and those are excluded), so it is correct and never named.

The pipeline keeps the intermediate results of each stage in a :class:`Stages`
memo, so that trying dozens of mutants on one case computes each distinct
projection and score matrix once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

import torch

from attncheck.dynamic import codes
from attncheck.dynamic.reference.mha import (
    Causal,
    Linear,
    Projections,
    RopeHook,
    causal_keep,
    merge_heads,
    split_heads,
)
from attncheck.dynamic.reference.post_norm import PostHook
from attncheck.dynamic.reference.rope import RopeSpec, apply_rope
from attncheck.dynamic.reference.variants import PositionBias, Variant, index_grid


@dataclass(frozen=True)
class Case:
    """One experiment the module was run on: float64 (b, s, d) inputs and a mask.

    ``keep`` is a bool keep-mask broadcastable to (b, h, q, k) as given to the
    module (None: no mask); ``causal`` is the alignment the module is meant to have.
    ``position_ids`` ((s,) or (b, s)) are the query positions for RoPE; by default
    keys sit at 0..k-1 and queries are the last q of them (as with a KV cache).
    """

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    keep: torch.Tensor | None = None
    causal: Causal = "none"
    position_ids: torch.Tensor | None = None
    residual: torch.Tensor | None = None  # a block's raw input, added back, when q, k, v read its norm (VAE)

    def positions(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(query positions, key positions) for the rotary embedding."""
        q_len, k_len = self.query.shape[1], self.key.shape[1]
        keys = torch.arange(k_len)
        if self.position_ids is not None:
            return self.position_ids, self.position_ids if q_len == k_len else keys
        return torch.arange(k_len - q_len, k_len), keys


@dataclass(frozen=True)
class Setting:
    """What is known about the module: its weights, head counts and rotary embedding, and the
    variant it declares (its scale, score and mask terms, sinks) and its q/k norm layers, so that
    a mistake inside a variant is named against that variant, not against plain attention."""

    proj: Projections
    num_heads: int
    num_kv_heads: int | None = None
    rope: RopeSpec | None = None
    variant: Variant | None = None
    qk_norm: RopeHook | None = None
    post: PostHook | None = None  # the module's own norm(output + input), applied after the output projection


class InapplicableError(ValueError):
    """This mistake cannot be built for these shapes (e.g. raw inputs of the wrong width)."""


Scale = Literal["head_dim", "d_model", "q_len", "k_len", "heads", "one", "times_sqrt_head_dim", "head_dim_linear"]
Inputs = Literal["projected", "raw", "raw_q", "raw_k", "raw_v", "kv_from_query"]
Layout = Literal["transpose", "view", "view_q"]
Rope = Literal[
    "correct",
    "sign",
    "other_layout",
    "missing_step_2",
    "positive_exponent",
    "head_dim_denominator",
    "on_value",
]
CausalKnob = Literal["as_meant", "hides_self", "sees_next", "other_alignment", "missing", "inverted"]
MaskKnob = Literal["fill", "multiply", "add_keep", "add_blocked", "inverted", "fill_positive", "fill_tiny"]
Axis = Literal["key", "query", "heads"]
Order = Literal["normal", "scale_after_softmax", "mask_after_softmax", "softmax_mask_softmax", "terms_after_softmax"]


@dataclass(frozen=True)
class Knobs:
    """Every way the mutated reference can deviate; the defaults are the reference."""

    inputs: Inputs = "projected"
    split: Layout = "transpose"
    rope: Rope = "correct"
    kv_map: Literal["grouped", "tiled"] = "grouped"
    scale: Scale = "head_dim"
    causal: CausalKnob = "as_meant"
    mask: MaskKnob = "fill"
    softmax: Axis = "key"
    order: Order = "normal"
    bias: Literal["as_declared", "transposed"] = "as_declared"
    merge: Layout = "transpose"
    output: Literal["projected", "raw"] = "projected"

    def turned(self) -> frozenset[str]:
        """The names of the knobs not at their reference setting."""
        default = Knobs()
        return frozenset(f.name for f in fields(self) if getattr(self, f.name) != getattr(default, f.name))

    @property
    def misplaces_bias(self) -> bool:
        """The mistake is in how a variant's position bias is applied: it exists only where the module
        declares one (a relative table, ALiBi, T5 buckets), and cannot be built elsewhere."""
        return self.bias != "as_declared" or self.order == "terms_after_softmax"

    def combine(self, other: Knobs) -> Knobs:
        """Both sets of mistakes at once; the knobs they turn must not overlap."""
        return replace(self, **{name: getattr(other, name) for name in other.turned()})


REFERENCE = Knobs()

_ROPE_ARGS: dict[str, dict[str, Any]] = {
    "correct": {},
    "on_value": {},
    "sign": {"sign": -1.0},
    "missing_step_2": {"frequencies": "missing-step-2"},
    "positive_exponent": {"frequencies": "positive-exponent"},
    "head_dim_denominator": {"frequencies": "head-dim-denominator"},
}


def _project(lin: Linear | None, x: torch.Tensor) -> torch.Tensor:
    return x if lin is None else lin(x)


def _split(x: torch.Tensor, heads: int, layout: Layout) -> torch.Tensor:
    b, s, d = x.shape
    if d % heads:
        raise InapplicableError(f"width {d} does not split into {heads} heads")
    return x.reshape(b, heads, s, d // heads) if layout == "view" else split_heads(x, heads)


def _merge(x: torch.Tensor, layout: Layout) -> torch.Tensor:
    b, h, s, dh = x.shape
    return merge_heads(x) if layout == "transpose" else x.reshape(b, s, h * dh)


def _rope_args(spec: RopeSpec, knob: Rope) -> dict[str, Any]:
    if knob == "other_layout":
        return {"layout": "interleaved" if spec.style == "half" else "half"}
    return _ROPE_ARGS[knob]


def scale_factor(knob: Scale, head_dim: int, d_model: int, q_len: int, k_len: int, heads: int) -> float:
    """The number the raw scores are multiplied by under a scale knob.

    ``d_model`` is the width of the module's input: heads * head_dim in a usual
    multi-head module, wider than the one head of a single-head class (a
    lecture's ``C ** -0.5`` with C = n_embd).
    """
    return {
        "head_dim": 1 / math.sqrt(head_dim),
        "d_model": 1 / math.sqrt(d_model),
        "q_len": 1 / math.sqrt(q_len),
        "k_len": 1 / math.sqrt(k_len),
        "heads": 1 / math.sqrt(heads),
        "one": 1.0,
        "times_sqrt_head_dim": math.sqrt(head_dim),
        "head_dim_linear": 1 / head_dim,
    }[knob]


def _causal_keep(q_len: int, k_len: int, alignment: Causal, knob: CausalKnob) -> torch.Tensor | None:
    """The causal keep-mask the mutant builds, or None for no causal mask."""
    if alignment == "none" or knob == "missing":
        return None
    if knob == "other_alignment":
        alignment = "bottom-right" if alignment == "top-left" else "top-left"
    offset = k_len - q_len if alignment == "bottom-right" else 0
    rows = torch.arange(q_len).unsqueeze(1) + offset
    cols = torch.arange(k_len).unsqueeze(0)
    if knob == "hides_self":
        return cols < rows
    if knob == "sees_next":
        return cols <= rows + 1
    if knob == "inverted":
        return cols > rows
    return causal_keep(q_len, k_len, alignment)


def _masked(scores: torch.Tensor, keep: torch.Tensor | None, knob: MaskKnob) -> torch.Tensor:
    """Apply the keep-mask to scores the way the knob says (fill and inverted fill with -inf)."""
    if keep is None:
        return scores
    if knob == "multiply":
        return scores * keep
    if knob == "add_keep":
        return scores + keep
    if knob == "add_blocked":
        return scores + ~keep
    if knob == "fill_positive":
        return scores.masked_fill(~keep, 1e4)
    if knob == "fill_tiny":
        return scores.masked_fill(~keep, -1e-9)
    return scores.masked_fill(~keep, float("-inf"))


_AXIS = {"key": -1, "query": -2, "heads": 1}


@dataclass
class Stages:
    """Memo of one case's intermediate results, keyed by the knobs each stage reads."""

    case: Case
    setting: Setting
    heads: dict[tuple[str, ...], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = field(
        default_factory=dict
    )
    scores: dict[tuple[str, ...], torch.Tensor] = field(default_factory=dict)
    weights: dict[tuple[str, ...], torch.Tensor] = field(default_factory=dict)
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)

    def projected(self, which: Literal["q", "k", "v"]) -> torch.Tensor:
        """The case's query, key or value through its projection, computed once."""
        if which not in self.inputs:
            source = {"q": self.case.query, "k": self.case.key, "v": self.case.value}[which]
            self.inputs[which] = _project(getattr(self.setting.proj, which), source)
        return self.inputs[which]

    def qkv(self, knobs: Knobs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-head q, k, v of shape (b, Hq, s, dh), K/V already expanded to Hq heads."""
        variant = self.setting.variant
        if knobs.misplaces_bias and not (variant and variant.positional and variant.score_mods):
            raise InapplicableError("the variant has no position bias to misplace")  # a soft-cap: softcap_engaged
        if knobs.bias == "transposed" and self.case.query.shape[1] != self.case.key.shape[1]:
            raise InapplicableError("a transposed bias needs as many queries as keys")
        key = (knobs.inputs, knobs.split, knobs.rope, knobs.kv_map)
        if key not in self.heads:
            self.heads[key] = self._qkv(knobs)
        return self.heads[key]

    def _qkv(self, knobs: Knobs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        case, setting = self.case, self.setting
        raw = {"raw": "qkv", "raw_q": "q", "raw_k": "k", "raw_v": "v"}.get(knobs.inputs, "")
        hq = setting.num_heads
        hkv = setting.num_kv_heads or hq
        q_layout: Layout = "view" if knobs.split == "view_q" else knobs.split
        q = _split(case.query if "q" in raw else self.projected("q"), hq, q_layout)
        if knobs.inputs == "kv_from_query":  # K and V projected from the query (no change in self-attention)
            if case.query.shape[1] != case.key.shape[1] and self._keep(knobs) is not None:
                raise InapplicableError("a mask laid out for the key input's length")
            k_in, v_in = _project(setting.proj.k, case.query), _project(setting.proj.v, case.query)
        else:
            k_in = case.key if "k" in raw else self.projected("k")
            v_in = case.value if "v" in raw else self.projected("v")
        k, v = _split(k_in, hkv, knobs.split), _split(v_in, hkv, knobs.split)
        if not q.shape[-1] == k.shape[-1] == v.shape[-1]:
            raise InapplicableError("query, key and value heads differ in width")
        if setting.qk_norm is not None:
            q, k = setting.qk_norm(q, k)
        if setting.rope is not None:
            q_pos, k_pos = case.positions()
            if knobs.inputs == "kv_from_query":
                k_pos = q_pos  # the keys are the query's tokens, at the query's positions
            args = _rope_args(setting.rope, knobs.rope)
            q, k = apply_rope(q, q_pos, setting.rope, **args), apply_rope(k, k_pos, setting.rope, **args)
            if knobs.rope == "on_value":
                v = apply_rope(v, k_pos, setting.rope)
        if hq != hkv:
            if knobs.kv_map == "grouped":
                k, v = k.repeat_interleave(hq // hkv, dim=1), v.repeat_interleave(hq // hkv, dim=1)
            else:
                k, v = k.repeat(1, hq // hkv, 1, 1), v.repeat(1, hq // hkv, 1, 1)
        return q, k, v

    def raw_scores(self, knobs: Knobs) -> torch.Tensor:
        key = (knobs.inputs, knobs.split, knobs.rope, knobs.kv_map)
        if key not in self.scores:
            q, k, _ = self.qkv(knobs)
            self.scores[key] = q @ k.transpose(-1, -2)
        return self.scores[key]

    def attention_weights(self, knobs: Knobs) -> torch.Tensor:
        """(b, Hq, q, k) weights; fully masked softmax groups give NaN (fill-dependent)."""
        key = (
            knobs.inputs,
            knobs.split,
            knobs.rope,
            knobs.kv_map,
            knobs.scale,
            knobs.causal,
            knobs.mask,
            knobs.softmax,
            knobs.order,
            knobs.bias,
        )
        if key not in self.weights:
            self.weights[key] = self._weights(knobs)
        return self.weights[key]

    def _keep(self, knobs: Knobs) -> torch.Tensor | None:
        case = self.case
        keep = case.keep
        if keep is not None and knobs.mask == "inverted":
            keep = ~keep
        causal = _causal_keep(case.query.shape[1], case.key.shape[1], case.causal, knobs.causal)
        variant = self.setting.variant
        if variant is not None and variant.mask_mods and knobs.causal == "as_meant":
            grid = index_grid(1, self.setting.num_heads, case.query.shape[1], case.key.shape[1])
            for mask_mod in variant.mask_mods:
                allowed = mask_mod(*grid)
                causal = allowed if causal is None else causal & allowed
        if causal is None:
            return keep
        return causal if keep is None else keep & causal

    def _scored(self, raw: torch.Tensor, factor: float, knobs: Knobs, terms: bool = True) -> torch.Tensor:
        """Scaled scores with the variant's score terms (bias, soft-cap) on them, unless ``terms`` is False."""
        return self._terms(raw * factor, knobs) if terms else raw * factor

    def _terms(self, scores: torch.Tensor, knobs: Knobs) -> torch.Tensor:
        """The variant's score terms applied to ``scores`` (or, misplaced, to the weights); a transposed
        bias swaps the query and key indices it reads (``table[h, j, i]``, ALiBi's m·(i - j))."""
        variant = self.setting.variant
        if variant is not None and variant.score_mods:
            b, h, i, j = index_grid(*scores.shape)
            for score_mod in variant.score_mods:
                if knobs.bias != "transposed":
                    scores = score_mod(scores, b, h, i, j)
                elif isinstance(score_mod, PositionBias):  # by reversed offsets (BEiT's class token stays)
                    scores = score_mod.transposed(scores, b, h, i, j)
                else:  # broadcasting keeps the (q, k) layout: the term reads [.., j, i] at (i, j)
                    scores = score_mod(scores, b, h, j, i)
        return scores

    def _softmax(self, scores: torch.Tensor, axis: int) -> torch.Tensor:
        """Softmax over ``axis``, with the variant's sink logits joining each key-axis row."""
        sinks = self.setting.variant.sinks if self.setting.variant is not None else None
        if sinks is None or axis != -1:
            return torch.softmax(scores, dim=axis)
        sink = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:3], 1)
        return torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]

    def _weights(self, knobs: Knobs) -> torch.Tensor:
        raw = self.raw_scores(knobs)
        b, h, q_len, k_len = raw.shape
        factor = scale_factor(knobs.scale, self.qkv(knobs)[0].shape[-1], self.case.query.shape[-1], q_len, k_len, h)
        declared = self.setting.variant.scale if self.setting.variant is not None else None
        if declared is not None and knobs.scale == "head_dim":
            factor = declared  # the module's declared scale is the intended one
        keep = self._keep(knobs)
        mask = "fill" if knobs.mask == "inverted" else knobs.mask
        if keep is not None:
            keep = keep.expand(b, h, q_len, k_len)
        axis = _AXIS[knobs.softmax]
        if knobs.order == "scale_after_softmax":
            return self._softmax(_masked(self._scored(raw, 1.0, knobs), keep, mask), axis) * factor
        if knobs.order == "mask_after_softmax":
            weights = self._softmax(self._scored(raw, factor, knobs), axis)
            return weights if keep is None else weights * keep
        if knobs.order == "terms_after_softmax":
            weights = self._softmax(_masked(self._scored(raw, factor, knobs, terms=False), keep, mask), axis)
            return self._terms(weights, knobs)
        if knobs.order == "softmax_mask_softmax":
            first = self._softmax(self._scored(raw, factor, knobs), -1)
            return self._softmax(_masked(first, keep, mask), axis)
        return self._softmax(_masked(self._scored(raw, factor, knobs), keep, mask), axis)

    def output(self, knobs: Knobs) -> torch.Tensor:
        """(b, q, d) output of the mutated reference."""
        weights = self.attention_weights(knobs)
        merged = _merge(weights @ self.qkv(knobs)[2], knobs.merge)
        return self._post(merged if knobs.output == "raw" else _project(self.setting.proj.o, merged))

    def _post(self, out: torch.Tensor) -> torch.Tensor:
        """The module's residual and post-norm around one output or a stack of them."""
        if self.setting.post is None:
            return out
        return self.setting.post(out, self.case.query if self.case.residual is None else self.case.residual)

    def outputs(self, candidates: Sequence[Knobs]) -> list[torch.Tensor | None]:
        """The outputs of many mutants, None where one cannot be built.

        Mutants that share their V, merge and output projection are stacked and
        finished with one matmul, one merge and one projection, which is where
        a search over hundreds of mutants spends its time otherwise.
        """
        results: list[torch.Tensor | None] = [None] * len(candidates)
        batches: dict[tuple[str, ...], list[int]] = {}
        for i, knobs in enumerate(candidates):
            try:
                self.qkv(knobs)
            except InapplicableError:
                continue
            key = (knobs.inputs, knobs.split, knobs.rope, knobs.kv_map, knobs.merge)
            batches.setdefault(key, []).append(i)
        to_project: list[tuple[int, torch.Tensor]] = []
        for indices in batches.values():
            first = candidates[indices[0]]
            weights = torch.stack([self.attention_weights(candidates[i]) for i in indices])
            per_head = weights @ self.qkv(first)[2]  # (n, b, h, q, dh)
            n, b, h, q, dh = per_head.shape
            if first.merge == "transpose":
                per_head = per_head.transpose(2, 3)
            for i, merged in zip(indices, per_head.reshape(n, b, q, h * dh), strict=True):
                if candidates[i].output == "raw":
                    results[i] = self._post(merged)
                else:
                    to_project.append((i, merged))
        # Mutants that skip the input projection merge to another width: project each width apart.
        by_shape: dict[tuple[int, ...], list[tuple[int, torch.Tensor]]] = {}
        for i, merged in to_project:
            by_shape.setdefault(tuple(merged.shape), []).append((i, merged))
        o = self.setting.proj.o
        for width, group in by_shape.items():
            if o is not None and width[-1] != o.weight.shape[1]:  # a width the output projection cannot read
                continue  # (SAM projects q, k, v down: a mutant skipping them cannot be built): left None
            projected = _project(o, torch.stack([merged for _, merged in group]))
            for (i, _), out in zip(group, self._post(projected), strict=True):
                results[i] = out
        return results


def mutated_mha(case: Case, setting: Setting, knobs: Knobs = REFERENCE) -> torch.Tensor:
    """The reference attention with the mistakes ``knobs`` turn on (NaN in fully masked rows)."""
    return Stages(case, setting).output(knobs)


@dataclass(frozen=True)
class Mutant:
    """A known mistake: a catalogue code, a knob setting and how to explain it.

    ``what`` is a template filled by :meth:`describe` with the numbers of a case:
    ``{dh}`` head_dim, ``{d_model}``, ``{q_len}``, ``{k_len}``, ``{heads}``,
    ``{kv_heads}``, ``{group}``, ``{alignment}``, ``{other_alignment}``, ``{style}``,
    and ``sqrt_*`` of the first four.
    """

    code: str
    name: str
    what: str
    why: str
    fix: str
    knobs: Knobs

    def apply(self, case: Case, setting: Setting) -> torch.Tensor:
        """The mutated reference output on this case."""
        return mutated_mha(case, setting, self.knobs)

    def describe(self, case: Case, setting: Setting) -> str:
        """``what`` with this case's numbers filled in."""
        return self.what.format(**_numbers(case, setting))

    def story(self, case: Case, setting: Setting) -> tuple[str, str, str]:
        """``what``, ``why`` and ``fix`` with this case's numbers filled in."""
        numbers = _numbers(case, setting)
        return self.what.format(**numbers), self.why.format(**numbers), self.fix.format(**numbers)


def _numbers(case: Case, setting: Setting) -> dict[str, Any]:
    heads = setting.num_heads
    kv_heads = setting.num_kv_heads or heads
    d_model = case.query.shape[-1]
    width = setting.proj.q.weight.shape[0] if setting.proj.q is not None else d_model
    dh = width // heads
    q_len, k_len = case.query.shape[1], case.key.shape[1]
    other = {"top-left": "bottom-right", "bottom-right": "top-left"}.get(case.causal, "none")
    style = setting.rope.style if setting.rope is not None else "half"
    numbers = {
        "dh": dh,
        "d_model": d_model,
        "q_len": q_len,
        "k_len": k_len,
        "heads": heads,
        "kv_heads": kv_heads,
        "group": heads // kv_heads,
        "alignment": case.causal,
        "other_alignment": other,
        "style": {"half": "half-split", "interleaved": "interleaved"}[style],
    }
    for name in ("dh", "d_model", "q_len", "k_len", "heads"):
        numbers[f"sqrt_{name}"] = f"{math.sqrt(numbers[name]):.3g}"
    return numbers


def _mutant(code: str, name: str, what: str, why: str, fix: str, **knobs: str) -> Mutant:
    return Mutant(code, name, what, why, fix, Knobs(**knobs))


_SCALE_WHY = (
    "the softmax temperature must follow the size of q·k, which grows with head_dim, not with anything else."
)
_SCALE_FIX = "multiply the scores by 1 / math.sqrt(head_dim) (head_dim = d_model // num_heads), once."
_MASK_FIX = "scores.masked_fill(~keep, float('-inf')) (or torch.finfo(dtype).min) before the softmax."

MUTANTS: tuple[Mutant, ...] = (
    _mutant(
        "ATT101",
        "no-qkv-projection",
        "splits the raw inputs into heads with no Q, K or V projection",
        "without learned projections every head compares the same raw features and nothing can be learned.",
        "project first: q = W_q(query), k = W_k(key), v = W_v(value), then split into heads.",
        inputs="raw",
    ),
    *(
        _mutant(
            "ATT101",
            f"no-{p}-projection",
            f"uses the raw input as {p.upper()} (the {p.upper()} projection is missing or its result unused)",
            f"{p.upper()} must be the learned projection of the input, like the other two.",
            f"{p} = W_{p}(input) before splitting into heads.",
            inputs=f"raw_{p}",
        )
        for p in ("q", "k", "v")
    ),
    _mutant(
        "ATT101",
        "kv-from-query",
        "projects K and V from the query input instead of the key and value inputs",
        "cross-attention then attends over the queries' own tokens: the key and value inputs are never read.",
        "k = W_k(key), v = W_v(value): each projection reads its own input.",
        inputs="kv_from_query",
    ),
    _mutant(
        "ATT102",
        "no-output-projection",
        "merges the heads and returns them with no output projection",
        "the heads are never mixed, and the output projection's weights are never used.",
        "return W_o(merged) after merging the heads.",
        output="raw",
    ),
    _mutant(
        "ATT104",
        "split-without-transpose",
        "splits (b, s, d) into heads with view(b, {heads}, s, {dh}) and no transpose",
        "that reshuffles positions and features across heads: a head sees pieces of several tokens.",
        "x.view(b, s, num_heads, head_dim).transpose(1, 2).",
        split="view",
    ),
    _mutant(
        "ATT104",
        "split-q-without-transpose",
        "splits the query into heads with view(b, {heads}, s, {dh}) and no transpose (K and V are split right)",
        "that reshuffles positions and features across heads: a query head sees pieces of several tokens.",
        "q.view(b, s, num_heads, head_dim).transpose(1, 2), like K and V.",
        split="view_q",
    ),
    _mutant(
        "ATT105",
        "merge-without-transpose",
        "merges (b, h, s, dh) back with view(b, s, {d_model}) without transposing back",
        "each output row then mixes several tokens' heads.",
        "out.transpose(1, 2).contiguous().view(b, s, d_model).",
        merge="view",
    ),
    _mutant(
        "ATT201",
        "scale-1/sqrt(d_model)",
        "divides the scores by sqrt(d_model) = {sqrt_d_model} instead of sqrt(head_dim) = {sqrt_dh}",
        _SCALE_WHY,
        _SCALE_FIX,
        scale="d_model",
    ),
    _mutant(
        "ATT201",
        "scale-1/sqrt(seq_len)",
        "divides the scores by sqrt(seq_len) = {sqrt_q_len} instead of sqrt(head_dim) = {sqrt_dh}",
        _SCALE_WHY,
        _SCALE_FIX,
        scale="q_len",
    ),
    _mutant(
        "ATT201",
        "scale-1/sqrt(key_len)",
        "divides the scores by sqrt(key length) = {sqrt_k_len} instead of sqrt(head_dim) = {sqrt_dh}",
        _SCALE_WHY,
        _SCALE_FIX,
        scale="k_len",
    ),
    _mutant(
        "ATT201",
        "scale-1/sqrt(num_heads)",
        "divides the scores by sqrt(num_heads) = {sqrt_heads} instead of sqrt(head_dim) = {sqrt_dh}",
        _SCALE_WHY,
        _SCALE_FIX,
        scale="heads",
    ),
    _mutant(
        "ATT201",
        "no-scale",
        "does not scale the scores (should divide by sqrt(head_dim) = {sqrt_dh})",
        "unscaled scores grow with head_dim and saturate the softmax.",
        _SCALE_FIX,
        scale="one",
    ),
    _mutant(
        "ATT201",
        "scale-multiplied",
        "multiplies the scores by sqrt(head_dim) = {sqrt_dh} instead of dividing",
        "it sharpens the softmax where it should temper it.",
        _SCALE_FIX,
        scale="times_sqrt_head_dim",
    ),
    _mutant(
        "ATT201",
        "scale-1/head_dim",
        "divides the scores by head_dim = {dh} instead of sqrt(head_dim)",
        "the square root matters: q·k has variance head_dim, so its spread is sqrt(head_dim).",
        _SCALE_FIX,
        scale="head_dim_linear",
    ),
    _mutant(
        "ATT201",
        "scaled-twice",
        "scales by 1/sqrt(head_dim) twice (q scaled, then the scores again): 1/{dh} in all",
        "the scale must be applied once.",
        _SCALE_FIX,
        scale="head_dim_linear",
    ),
    _mutant(
        "ATT202",
        "softmax-over-queries",
        "takes the softmax over the query axis (dim=-2) instead of the keys",
        "each query's weights over the keys must sum to 1; over queries, one query's output depends on the "
        "others.",
        "torch.softmax(scores, dim=-1).",
        softmax="query",
    ),
    _mutant(
        "ATT202",
        "softmax-over-heads",
        "takes the softmax over the heads axis (dim=1) instead of the keys",
        "each query's weights over the keys must sum to 1; over heads, the heads leak into each other.",
        "torch.softmax(scores, dim=-1).",
        softmax="heads",
    ),
    _mutant(
        "ATT203",
        "scale-after-softmax",
        "applies the 1/sqrt(head_dim) scale after the softmax",
        "scaling the weights leaves rows that sum to 1/sqrt(head_dim) and an unscaled softmax.",
        "scale the scores, then take the softmax.",
        order="scale_after_softmax",
    ),
    _mutant(
        "ATT203",
        "mask-after-softmax",
        "zeroes the masked weights after the softmax without renormalising",
        "the remaining weights no longer sum to 1.",
        f"mask the scores before the softmax: {_MASK_FIX}",
        order="mask_after_softmax",
    ),
    _mutant(
        "ATT203",
        "softmax-mask-softmax",
        "takes a softmax, masks the probabilities and takes a second softmax",
        "softmax over probabilities in [0, 1] flattens the weights towards uniform.",
        f"one softmax, over masked scores: {_MASK_FIX}",
        order="softmax_mask_softmax",
    ),
    _mutant(
        "ATT203",
        "score-terms-after-softmax",
        "adds the declared position bias (relative-position table, ALiBi, T5 buckets) to the probabilities, "
        "after the softmax",
        "a position bias must shift the scores before they are normalised; added after, the rows no "
        "longer sum to 1 and the bias changes the output linearly instead of re-weighting the keys.",
        "add the bias to the scaled scores, then take the softmax: attn = softmax(q @ k.T * scale + bias).",
        order="terms_after_softmax",
    ),
    _mutant(
        "ATT301",
        "multiplicative-mask",
        "multiplies the scores by the 0/1 mask",
        "a masked score becomes 0, and exp(0) still gives the masked key weight.",
        _MASK_FIX,
        mask="multiply",
    ),
    _mutant(
        "ATT301",
        "added-keep-mask",
        "adds the 0/1 keep-mask to the scores",
        "adding 1 to kept keys barely changes the weights: masked keys still get weight.",
        _MASK_FIX,
        mask="add_keep",
    ),
    _mutant(
        "ATT301",
        "added-blocked-mask",
        "adds the 0/1 blocked-mask (1 = masked) to the scores",
        "adding 1 to masked keys raises their weight instead of removing it.",
        _MASK_FIX,
        mask="add_blocked",
    ),
    _mutant(
        "ATT304",
        "mask-polarity",
        "treats the mask inverted: it keeps exactly the keys that should be dropped",
        "True/1 means keep in this module's convention, and the code blocks those keys.",
        "masked_fill(~keep, -inf) for a keep-mask (masked_fill(mask, -inf) only when True means blocked).",
        mask="inverted",
    ),
    _mutant(
        "ATT304",
        "causal-inverted",
        "blocks the past and keeps the future (causal mask polarity inverted)",
        "a causal token may see itself and the tokens before it, never after.",
        "keep = torch.tril(torch.ones(q, k, dtype=torch.bool)); scores.masked_fill(~keep, -inf).",
        causal="inverted",
    ),
    _mutant(
        "ATT302",
        "mask-fill-positive",
        "fills the masked scores with a large positive value (+1e4) instead of a large negative one",
        "a positive fill gives the masked keys all the weight: it behaves like an inverted mask.",
        _MASK_FIX,
        mask="fill_positive",
    ),
    _mutant(
        "ATT302",
        "mask-fill-tiny",
        "fills the masked scores with a tiny value (-1e-9) that masks nothing",
        "-1e-9 barely changes a score, so masked keys keep their weight.",
        _MASK_FIX,
        mask="fill_tiny",
    ),
    _mutant(
        "ATT305",
        "causal-hides-self",
        "builds the causal mask one diagonal too far: a token cannot see itself",
        "a token must see itself (row 0 would see nothing).",
        "block with torch.triu(ones, diagonal=1), not diagonal=0.",
        causal="hides_self",
    ),
    _mutant(
        "ATT305",
        "causal-sees-next",
        "builds the causal mask one diagonal short: a token sees the next token",
        "a causal token must never see a later one.",
        "block with torch.triu(ones, diagonal=1), not diagonal=2.",
        causal="sees_next",
    ),
    _mutant(
        "ATT305",
        "causal-alignment",
        "aligns the causal mask {other_alignment} instead of {alignment}",
        "with fewer queries than keys (a KV cache), the last query is the last token and must see every key.",
        "offset the diagonal by k_len - q_len (bottom-right), as flash-attn does.",
        causal="other_alignment",
    ),
    _mutant(
        codes.FUTURE_LEAK,
        "causal-mask-missing",
        "applies no causal mask",
        "a causal model must not let a token see later tokens.",
        "mask the scores with torch.tril(ones(q, k)) before the softmax.",
        causal="missing",
    ),
    _mutant(
        "ATT401",
        "gqa-tiled",
        "expands the {kv_heads} KV heads with .repeat (tiling): query head h uses KV head h % {kv_heads}",
        "grouped-query attention pairs query head h with KV head h // {group}, as pretrained weights expect.",
        "k.repeat_interleave({group}, dim=1) (HF repeat_kv), not k.repeat(1, {group}, 1, 1).",
        kv_map="tiled",
    ),
    _mutant(
        "ATT402",
        "rope-sign",
        "rotates q and k the wrong way (RoPE sign flipped)",
        "the rotation direction must match the one the weights were trained with.",
        "x * cos + rotate_half(x) * sin with rotate_half(x) = cat(-x2, x1).",
        rope="sign",
    ),
    _mutant(
        "ATT402",
        "rope-cos-sin-layout",
        "pairs the dims {style} but lays cos/sin out for the other convention",
        "each pair of dims must rotate by one angle; mixed layouts rotate partners by different angles.",
        "half-split: cat(freqs, freqs); interleaved: repeat_interleave(freqs, 2).",
        rope="other_layout",
    ),
    _mutant(
        "ATT402",
        "rope-inv-freq-step",
        "builds inv_freq as base^(-i/d) (arange without step 2)",
        "the frequencies must be base^(-2i/d), one per pair of dims.",
        "inv_freq = 1.0 / base ** (torch.arange(0, d, 2) / d).",
        rope="missing_step_2",
    ),
    _mutant(
        "ATT402",
        "rope-inv-freq-exponent",
        "builds inv_freq as base^(+2i/d) (the 1.0 / is missing)",
        "frequencies must fall from 1 to 1/base; rising ones alias at every position.",
        "inv_freq = 1.0 / base ** (torch.arange(0, d, 2) / d).",
        rope="positive_exponent",
    ),
    _mutant(
        "ATT402",
        "rope-inv-freq-head-dim",
        "divides the inv_freq exponent by head_dim, not the rotary width",
        "with partial rotary embedding the frequencies are spread over the rotary dims only.",
        "inv_freq = 1.0 / base ** (torch.arange(0, rotary_dim, 2) / rotary_dim).",
        rope="head_dim_denominator",
    ),
    _mutant(
        "ATT404",
        "rope-on-value",
        "applies the rotary embedding to V as well as Q and K",
        "rotating V makes the output depend on absolute positions.",
        "rotate q and k only.",
        rope="on_value",
    ),
    _mutant(
        "ATT405",
        "position-bias-transposed",
        "applies the relative-position bias with query and key swapped (a table read transposed, ALiBi "
        "slopes of the wrong sign): query i gets the bias of key j's offset from i",
        "a relative bias holds one value per signed offset (i - j); read as (j, i) every offset changes sign, "
        "so each query favours the keys on the other side of it.",
        "gather the table as table[index[i, j]] laid out (heads, queries, keys): "
        "bias.view(N, N, heads).permute(2, 0, 1), not permute(2, 1, 0).",
        bias="transposed",
    ),
)
"""Every known mistake, in catalogue order (except that a positive mask fill, ATT302, which behaves
exactly like an inverted mask, comes after ATT304: without a static finding saying otherwise, the
inverted mask is the likelier story); diagnosis tries them alone and in pairs."""


def knob_groups(mutants: tuple[Mutant, ...] = MUTANTS) -> dict[Knobs, tuple[Mutant, ...]]:
    """Mutants that share a knob setting (and so an output), e.g. 1/head_dim and scaled twice."""
    groups: dict[Knobs, list[Mutant]] = {}
    for mutant in mutants:
        groups.setdefault(mutant.knobs, []).append(mutant)
    return {knobs: tuple(group) for knobs, group in groups.items()}
