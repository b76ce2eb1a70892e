"""How to build and call a target: constructor candidates and forward-argument roles.

The dynamic checker knows nothing about a user's class except what the static
pass read from its signatures. People spell the same few sizes in many ways
(``d_model``, ``embed_dim``, ``n_embd``, ``hidden_size``...), so this module maps
parameter names to small test sizes and the forward parameters to roles (the
one input of self-attention, query/key/value, the mask). It never imports torch:
the child (``executor``) shares its name tables to fill a config object.

When nothing fits, the target is skipped with a one-line hint that shows how
to declare it under ``[tool.attncheck.targets]``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from attncheck.dynamic.binding import layout, source_facts
from attncheck.dynamic.binding.mask_docs import (
    MaskConvention,
    MaskShape,
    documented_convention,
    documented_float,
    documented_shape,
)
from attncheck.findings import Parameter, Target

D_MODEL = 32
HEADS = 4
KV_HEADS = 2
MAX_POSITIONS = 16
VOCAB = 64

MODEL_DIM_NAMES = frozenset(
    {
        "d_model",
        "hidden_dim",
        "embed_dim",
        "dim",
        "n_embd",
        "hidden_size",
        "d",
        "model_dim",
        "emb_dim",
        "embedding_dim",
        "in_dim",
        "input_dim",
        "hidden",
        "n_state",
        "d_embed",
        "embed_size",
        "num_hiddens",
        "query_dim",
        "n_embed",
        "d_hidden",
        "in_features",
        "width",
        "channels",
        "embedding_size",
        "dim_model",
    }
)
HEAD_NAMES = frozenset(
    {
        "num_heads",
        "head_num",
        "heads",
        "n_head",
        "n_heads",
        "num_attention_heads",
        "nhead",
        "h",
        "num_head",
        "n_heads_q",
        "num_q_heads",
        "attention_heads",
        "nheads",
        "num_query_heads",
        "n_q_heads",
        "n_query_heads",
        "num_heads_q",
        "q_heads",
        "n_q_head",
        "num_q_head",
        "query_heads",
    }
)
KV_HEAD_NAMES = frozenset(
    {
        "num_key_value_heads",
        "n_kv_heads",
        "num_kv_heads",
        "kv_heads",
        "n_kv_head",
        "num_kv_head",
        "n_head_kv",
        "num_key_value_groups_heads",
        "n_kv_groups",
        "num_kv_groups",
        "num_groups",
        "n_groups",
        "kv_groups",
        "num_heads_kv",
        "n_heads_kv",
        "key_value_heads",
        "num_kv",
    }
)
# With HEADS = 4 and KV_HEADS = 2, "groups" means 2 whether a file counts KV heads or queries per KV head.
# The names that can only count K/V heads: a declared kv_heads goes there, never into a "groups" one.
KV_HEAD_COUNT_NAMES = frozenset(name for name in KV_HEAD_NAMES if "group" not in name)
HEAD_DIM_NAMES = frozenset({"head_dim", "d_k", "d_head", "dim_head", "head_size", "d_kv", "dk", "d_v", "kv_channels"})
DROPOUT_NAMES = frozenset(
    {
        "dropout",
        "attn_dropout",
        "p",
        "attention_dropout",
        "dropout_rate",
        "attn_pdrop",
        "resid_pdrop",
        "drop",
        "dropout_p",
        "attn_drop",
        "proj_drop",
        "drop_rate",
        "attn_drop_rate",
        "attention_probs_dropout_prob",
        "hidden_dropout_prob",
        "dropout_prob",
        "embd_pdrop",
        "resid_dropout",
        "p_dropout",
        "attn_p",
    }
)
POSITION_NAMES = frozenset(
    {
        "block_size",
        "max_len",
        "max_seq_len",
        "max_position_embeddings",
        "n_ctx",
        "context_length",
        "seq_len",
        "max_seq_length",
        "n_positions",
        "max_length",
        "context_size",
        "max_seqlen",
    }
)
VOCAB_NAMES = frozenset({"vocab_size", "n_vocab", "num_tokens", "vocab"})
# A layer's index in its model (``LlamaAttention(config, layer_idx)``): layer 0 is the first layer's behaviour.
LAYER_INDEX_NAMES = frozenset({"layer_idx", "layer_id", "layer_index", "block_idx"})
LAYER_NUMBER_NAMES = frozenset({"layer_number", "layer_num"})  # 1-based (Megatron divides by it)
# A config's window of local attention: shorter than the probes' sequences, so the window shows.
WINDOW_NAMES = frozenset({"sliding_window", "window_size", "attention_window", "local_window_size"})
WINDOW = 3
# A config's soft-cap of the scores: small enough that the probes' scores reach it (Gemma 2's default 50 does not).
SOFTCAP_NAMES = frozenset({"attn_logit_softcapping", "logit_softcapping", "softcap", "logit_softcap"})
SOFTCAP = 5.0
CONFIG_NAMES = frozenset({"config", "cfg", "args", "params", "conf", "model_args", "hparams", "opt"})

MASK_NAMES = (
    "mask",
    "attn_mask",
    "attention_mask",
    "key_padding_mask",
    "src_mask",
    "tgt_mask",
    "padding_mask",
)
# Optional forward arguments that set token positions (for the RoPE relative-shift check): a tensor of
# positions, or an integer offset added to 0..s-1.
POSITION_TENSOR_NAMES = frozenset({
    "position_ids", "positions", "pos_ids", "pos", "position", "input_pos", "position_idx", "pos_idx",
    "token_positions",
})
POSITION_OFFSET_NAMES = frozenset({
    "start_pos", "offset", "seqlen_offset", "pos_offset", "position_offset", "start_position",
    "past_length", "past_len",
})
PositionKind = Literal["ids", "offset"]
# Required forward arguments that are not tensors of hidden states: positions, rotary tables, caches.
NOT_HIDDEN = re.compile(r"pos|freq|cos|sin|cache|past|rope|rotary|index|ids|offset|step", re.IGNORECASE)
# Optional forward parameters that take a KV cache: the KV-cache probe passes a (k, v) tuple there.
CACHE_NAMES = ("past_key_value", "past_key_values", "layer_past", "kv_cache", "cache", "past_kv", "past")

# [tool.attncheck.targets.NAME]: constructor arguments, forward roles in parameter order, the mask
# convention and causality; d_model and heads give the sizes when init's names do not say them; the
# variant asked for: kv_heads (grouped-query attention), rope and rope_base (the rotary convention, its base).
DECLARATION_KEYS = ("init", "forward", "mask", "causal", "d_model", "heads", "kv_heads", "rope", "rope_base")
RopeConvention = Literal["half", "interleaved"]  # rotate_half (HF LLaMA) | pairs (Meta, GPT-J)

Role = Literal["x", "query", "key", "value", "kv", "mask"]
ImageLayout = Literal["bchw", "bhwc"]
Style = Literal["self", "cross", "function"]

_ROLE_ALIASES: dict[str, Role] = {
    "x": "x",
    "hidden_states": "x",
    "input": "x",
    "query": "query",
    "q": "query",
    "key": "key",
    "k": "key",
    "value": "value",
    "v": "value",
    "kv": "kv",
    "key_value": "kv",
    "memory": "kv",
    "context": "kv",
    "mask": "mask",
}
ROLE_NAMES = tuple(_ROLE_ALIASES)  # what a declaration's forward may name (config.py validates it)
# Required forward arguments bound by their names (``forward(values, keys, query, mask)``), before their count.
_NAMED_ROLES: dict[str, Role] = {
    **{name: role for name, role in _ROLE_ALIASES.items() if role != "mask"},
    "queries": "query",
    "keys": "key",
    "values": "value",
    "inputs": "x",
    "src": "x",
    "hidden": "x",
    "encoder_hidden_states": "kv",
    "encoder_out": "kv",
    "key_value_states": "kv",
}
_ROLE_SETS = ({"x"}, {"query", "kv"}, {"query", "key", "value"})


def size_for(name: str, dropout: float = 0.0) -> Any:
    """The small test value for a size-like parameter or config field, None when unknown."""
    lowered = name.lower()
    table: list[tuple[frozenset[str], Any]] = [
        (MODEL_DIM_NAMES, D_MODEL),
        (HEAD_NAMES, HEADS),
        (KV_HEAD_NAMES, KV_HEADS),
        (HEAD_DIM_NAMES, D_MODEL // HEADS),
        (DROPOUT_NAMES, dropout),
        (POSITION_NAMES, MAX_POSITIONS),
        (VOCAB_NAMES, VOCAB),
        (LAYER_INDEX_NAMES, 0),
        (LAYER_NUMBER_NAMES, 1),
    ]
    for names, value in table:
        if lowered in names:
            return value
    if "dropout" in lowered or lowered.endswith("pdrop"):
        return dropout
    return None


def config_value(name: str, dropout: float = 0.0) -> Any:
    """The small test value of a field of the module's own config class: a size, a window short
    enough to show at the probes' lengths (only a config's window: a constructor's ``window_size``
    is as often a 2-D patch window, bound by its use), or a soft-cap the probes' scores reach."""
    lowered = name.lower()
    if lowered in WINDOW_NAMES or lowered in SOFTCAP_NAMES:
        return WINDOW if lowered in WINDOW_NAMES else SOFTCAP
    found = size_for(name, dropout)
    if found is None and "_" in lowered:  # a second stream's sizes: Dia's cross_hidden_size, cross_head_dim
        found = next((value for suffix, value in _STREAM_SIZES if lowered.endswith(suffix)), None)
    return found


# The sizes of another stream a config may carry (an encoder's width for cross-attention), by suffix: the
# same small test sizes, so both streams are as wide as the probes' inputs.
_STREAM_SIZES = (
    ("_hidden_size", D_MODEL), ("_num_attention_heads", HEADS), ("_num_key_value_heads", KV_HEADS),
    ("_head_dim", D_MODEL // HEADS),
)


def all_sizes(dropout: float = 0.0) -> dict[str, Any]:
    """Every known size name with its test value: the fallback config namespace."""
    names = (
        MODEL_DIM_NAMES | HEAD_NAMES | KV_HEAD_NAMES | HEAD_DIM_NAMES | DROPOUT_NAMES | POSITION_NAMES | VOCAB_NAMES
        | LAYER_INDEX_NAMES | LAYER_NUMBER_NAMES
    )
    values = {name: size_for(name, dropout) for name in names}
    values.update(bias=True, is_causal=False, layer_norm_epsilon=1e-5, rms_norm_eps=1e-6, rope_theta=10000.0)
    return values


@dataclass(frozen=True)
class Dims:
    """Sizes the parent plans its inputs with."""

    d_model: int = D_MODEL
    heads: int = HEADS
    inner: int | None = None  # width of q, k, v and the output when it is not d_model (one head of head_size)

    @property
    def width(self) -> int:
        return self.inner or self.d_model


@dataclass(frozen=True)
class DeclaredVariant:
    """The variant a declaration asks for, which the probes hold the module to (an assignment's
    ``gqa``/``rope`` keys under ``attncheck grade``): None where it leaves a part free."""

    kv_heads: int | None = None
    rope: RopeConvention | None = None
    rope_base: float | None = None

    @classmethod
    def of(cls, declaration: Mapping[str, Any]) -> DeclaredVariant | None:
        found = cls(declaration.get("kv_heads"), declaration.get("rope"), declaration.get("rope_base"))
        return None if found == cls() else found


@dataclass(frozen=True)
class InitCandidate:
    """One way to construct the class: keyword values, and a config object to build in the child.

    ``config`` is ``{"param": name, "class": class name or None, "reads": fields __init__ reads}``: the child builds
    the class from the module (or a namespace of every known size) with small sizes.
    """

    label: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    args: tuple[Any, ...] = ()
    config: Mapping[str, Any] | None = None
    dropout_names: tuple[str, ...] = ()
    heads: int = HEADS  # query heads this construction gives, for the reference
    sets_width: bool = False  # an argument of this construction is the model width (by name or use)
    by_use: tuple[str, ...] = ()  # arguments whose value was chosen from their use in __init__, not their name

    def to_request(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "kwargs": dict(self.kwargs),
            "args": list(self.args),
            "config": dict(self.config) if self.config else None,
            "dropout_names": list(self.dropout_names),
        }


@dataclass(frozen=True)
class ForwardPlan:
    """The forward parameters that receive our tensors, in call order."""

    roles: tuple[tuple[str, Role], ...]  # (parameter name, role) passed positionally
    mask_name: str | None = None  # passed by keyword
    mask_required: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)  # keyword overrides (dropout_p=0.0)
    per_head: bool = False  # inputs are (batch, heads, seq, head_dim), as for a bare function
    position_name: str | None = None  # an optional forward parameter that sets token positions
    position_kind: PositionKind | None = None  # "ids": a tensor of positions; "offset": an int added to them
    rank: int = 0  # 3: a function on (batch, seq, dim), called with the one head of (batch, 1, seq, dim) inputs
    # 4: a class on (batch, groups, seq, dim), two batch axes before the tokens (SAM's point batch): the child
    # feeds each (batch, seq, dim) input as one group, (batch, 1, seq, dim), and reads that group's output back
    # A class on feature maps: "bchw" (channels first) or "bhwc" (channels last); the child lays each
    # (batch, seq, dim) input out as a 1 x seq map and reads the output map back as a sequence.
    image: ImageLayout | None = None
    # A required mask: the all-keep masks to try, (shape, convention) in order, for calls that test no mask.
    neutral: tuple[tuple[MaskShape, MaskConvention | Literal["keep-float"]], ...] = ()
    mask_shape: MaskShape | None = None  # the mask's shape its documentation gives
    mask_rank: int | None = None  # the rank the code tiles the mask to (``mask.repeat(1, n, 1, 1)``: 4)
    mask_float: bool = False  # documented as a float 0/1 mask: keep and blocked masks go as 1.0/0.0
    # The caller puts causality (and a window) into the mask, as a transformers model does for its layers:
    # the child sends the model's 4-D additive mask, combined with the probe's own.
    caller_mask: bool = False
    # Required non-hidden inputs the child builds per call: (name, "ids" | "offset" | a helper's name for freqs_cis)
    generated: tuple[tuple[str, str], ...] = ()
    # Why the inputs are (seq, batch, dim), as the code states (``layout``); '' for batch-first. The child
    # feeds them so and turns the output back: the parent plans and judges batch-first.
    sequence_first: str = ""

    @property
    def style(self) -> Style:
        if self.per_head:
            return "function"
        roles = {role for _, role in self.roles}
        return "self" if roles == {"x"} else "cross"

    def to_request(self) -> dict[str, Any]:
        return {
            "roles": [list(pair) for pair in self.roles],
            "mask_name": self.mask_name,
            "mask_required": self.mask_required,
            "extra": dict(self.extra),
            "neutral": [list(spec) for spec in self.neutral],
            "rank": self.rank,
            "image": self.image,
            "generated": [list(pair) for pair in self.generated],
            "mask_float": self.mask_float,
            "caller_mask": self.caller_mask,
            "sequence_first": bool(self.sequence_first),
        }


@dataclass(frozen=True)
class Binding:
    """How to build and call a target, or why it cannot be (``reason`` and ``hint``)."""

    target: Target
    candidates: tuple[InitCandidate, ...] = ()
    forward: ForwardPlan | None = None
    dims: Dims = Dims()
    declared_mask: MaskConvention | None = None
    declared_causal: bool | None = None
    reason: str = ""
    hint: str = ""
    # every causal switch in the code is off (is_causal=False, causal=False), or the code has none, only a name
    code_not_causal: bool = False
    declared_variant: DeclaredVariant | None = None  # the declaration's kv_heads, rope, rope_base
    names_dropout: bool = True  # the code spells a dropout: a config's rates may be its own
    post_norm: bool = False  # forward returns ``self.norm(out + input)``: the reference applies the module's norm
    # forward returns ``x + proj(attention(self.<pre_norm>(x)))`` (a VAE / U-Net block): the reference applies
    # that layer of the module to its input and adds the input back ('' when it does not)
    pre_norm: str = ""
    # a construct the code shows that the reference does not model (linear attention's feature map), named
    # when the output misses the reference: the target is then skipped, never ATT903
    unmodelled: str = ""
    # causal only without a mask (``is_causal=attention_mask is None``): a mask given is the whole mask, its
    # causal part included (HF's convention), so a run with one is judged without the module's causality
    mask_replaces_causal: bool = False

    @property
    def filled_hint(self) -> str:
        """The declaration hint with the constructor values the first candidate tried."""
        return declaration_hint(self.target, self.candidates[0].kwargs if self.candidates else None)

    @property
    def width_guessed(self) -> bool:
        """No constructor argument, config or declaration sets the input width: 32 is the harness's guess."""
        if not self.target.is_class or any(c.config or c.label == DECLARED for c in self.candidates):
            return False
        return not any(c.sets_width for c in self.candidates)

    @property
    def ok(self) -> bool:
        return self.forward is not None and (bool(self.candidates) or not self.target.is_class)

    @property
    def style(self) -> Style:
        if not self.target.is_class:
            return "function"
        assert self.forward is not None
        return self.forward.style

    def chosen(self, label: str | None) -> Binding:
        """This binding with the sizes of the candidate the child kept (found by its label)."""
        candidate = next((c for c in self.candidates if c.label == label), None)
        if candidate is None or candidate.heads == self.dims.heads:
            return self
        return replace(self, dims=replace(self.dims, heads=candidate.heads))


def declaration_hint(target: Target, values: Mapping[str, Any] | None = None) -> str:
    """A one-line ``pyproject.toml`` declaration the user can fill in for this target
    (with the constructor ``values`` the harness tried, where it has them)."""
    values = values or {}
    inits = [p.name for p in target.init_params if p.name != "self" and p.default is None][:3] or ["d_model"]
    init = ", ".join(f"{name} = {json.dumps(values[name]) if name in values else '...'}" for name in inits)
    forward = ", ".join(f'"{p.name}"' for p in _call_params(target)) or '"query", "key", "value", "mask"'
    head = f"[tool.attncheck.targets.{target.name}]"
    init_part = f"init = {{{init}}}, " if target.is_class else ""
    return (
        f"declare it in pyproject.toml: {head} {init_part}forward = [{forward}], "
        'mask = "keep" | "blocked" | "additive", causal = true'
    )


def _call_params(target: Target) -> list[Parameter]:
    params = target.forward_params
    return [p for p in params if p.name not in ("self", "cls") and p.kind in ("positional", "keyword")]


# Karpathy's lecture: ``MultiHeadAttention`` over an ``nn.ModuleList`` of ``Head`` modules.
HEADS_AS_MODULES = (
    "its heads are {head} modules concatenated (torch.cat over a list of them): each {head} is checked as "
    "its own target, and the reference does not assemble heads from separate modules"
)


def _skip(target: Target, reason: str) -> Binding:
    return Binding(target, reason=reason, hint=declaration_hint(target))


def bind(target: Target, declaration: Mapping[str, Any] | None = None, source: str = "") -> Binding:
    """Candidate constructions and the forward plan for ``target``; a skip reason when none fits.

    ``source`` is the file's text: how the code uses its arguments decides what names do not.
    """
    declaration = declaration or {}
    unknown = sorted(set(declaration) - set(DECLARATION_KEYS))
    if unknown:
        return _skip(target, f"unknown key {unknown[0]!r} in its declaration (known: {', '.join(DECLARATION_KEYS)})")
    mask = declaration.get("mask")
    if mask is not None and mask not in ("keep", "blocked", "additive"):
        return _skip(target, f'mask = "{mask}" is not one of "keep", "blocked", "additive"')
    causal = declaration.get("causal")
    code = source_facts.read(source, target.name, target.line) if source else source_facts.CodeFacts()
    declared = "forward" in declaration
    if not target.is_class and target.forward_params and target.forward_params[0].name == "self":
        return Binding(target, reason=METHOD_OUTSIDE_CLASS)  # nothing to declare: no hint
    forward = _declared_forward(target, declaration["forward"]) if declared else _infer_forward(target, code)
    if isinstance(forward, str):
        return _skip(target, forward)
    if not declared and _is_per_head_class(target, forward, code):
        forward = replace(forward, per_head=True)
    docs = "\n".join(filter(None, [target.docstring, code.forward_doc]))
    forward = _with_positions(target, forward)
    forward = _with_mask_order(target, forward, mask, docs, code)
    if not declared:
        forward = _with_rank(target, forward, code)
        if isinstance(forward, str):
            return _skip(target, forward)
    if (target.is_class and not forward.per_head) or forward.rank == 3:  # (b, s, d) inputs, not per-head ones
        forward = replace(forward, sequence_first=layout.sequence_first(code, docs, forward.roles[0][0]))
        if target.is_class and code.input_residual and not code.pre_norm:
            return _skip(target, INPUT_RESIDUAL)
        if target.is_class and code.pre_norm and forward.image is None:
            forward = replace(forward, image=_block_layout(code))
        if target.is_class and code.convolution_only:  # nothing to declare: no hint
            return Binding(target, reason=CONVOLUTION_ONLY)
        if target.is_class and code.upsamples:
            return _skip(target, UPSAMPLED)
        if target.is_class and code.heads_as_modules:  # nothing to declare: no hint
            return Binding(target, reason=HEADS_AS_MODULES.format(head=code.heads_as_modules))
    elif forward.per_head:
        forward = replace(forward, sequence_first=layout.sequence_first_heads(code, forward.roles[0][0]))
    # A required mask is always given: code causal only without one (ChatGLM's core) leaves causality to it.
    # or no spelling of causality at all, only a name (``causal_mask = attention_mask[...]``): the caller's mask
    not_causal = (code.causal_off or bool(forward.mask_required and forward.mask_name in code.causal_without)
                  or not code.spells_causal)
    unmodelled = LINEAR_ATTENTION.format(feature_map=code.kernel_feature_map) if code.kernel_feature_map else ""
    # a mask documented as key padding alone, (b, k) or (b, 1, 1, k), cannot carry the causal part: there the
    # module's causality switched off by a mask is a leak, and the runs keep their causality. A caller's mask
    # (transformers' ``attention_mask`` beside ``self.is_causal``) already gets its causal part from the harness.
    mask_replaces_causal = bool(forward.mask_name and forward.mask_name in code.causal_without) and not (
        forward.caller_mask or forward.mask_shape in ("bk", "b11k"))
    if not target.is_class:
        dims = Dims(D_MODEL, 1) if forward.rank == 3 else Dims()
        return Binding(
            target, forward=forward, dims=dims, declared_mask=mask, declared_causal=causal, code_not_causal=not_causal,
            declared_variant=DeclaredVariant.of(declaration), unmodelled=unmodelled,
            mask_replaces_causal=mask_replaces_causal,
        )
    if "init" in declaration:
        init = declaration["init"]
        if not isinstance(init, Mapping):
            return _skip(target, "init must be a table of constructor arguments")
        candidates: tuple[InitCandidate, ...] | str = (_declared_candidate(init, declaration),)
        dims = _declared_dims(init, declaration)
    else:
        sized_core = forward.per_head and any(_per_head_size(p.name) is not None for p in target.init_params)
        candidates = _infer_candidates(target, code, sized_core)
        dims = PER_HEAD_CLASS if sized_core else _single_head_dims(target, code) or _one_head_by_structure(target, code)
        dims = dims or Dims()
        if code.global_width and not {p.name.lower() for p in target.init_params} & MODEL_DIM_NAMES:
            dims = replace(dims, d_model=code.global_width)  # the lecture's n_embd, a constant of the file
    if isinstance(candidates, str):
        return _skip(target, candidates)
    variant = DeclaredVariant.of(declaration)
    if variant is not None and variant.kv_heads is not None:
        candidates = tuple(_with_kv_heads(c, variant.kv_heads) for c in candidates)
    return Binding(target, candidates, forward, dims, mask, causal, code_not_causal=not_causal,
                   declared_variant=variant, names_dropout=code.names_dropout, post_norm=code.post_norm_residual,
                   pre_norm=code.pre_norm, unmodelled=unmodelled, mask_replaces_causal=mask_replaces_causal)


def _with_kv_heads(candidate: InitCandidate, kv_heads: int) -> InitCandidate:
    """A construction with the declared K/V head count in every argument named like one."""
    kwargs = {name: kv_heads if name.lower() in KV_HEAD_COUNT_NAMES else value
              for name, value in candidate.kwargs.items()}
    return replace(candidate, kwargs=kwargs)


_NEUTRAL_SHAPES: tuple[MaskShape, ...] = ("b11k", "bk", "b1qk", "bqk")
_NEUTRAL_CONVENTIONS: tuple[MaskConvention | Literal["keep-float"], ...] = ("keep", "keep-float", "additive", "blocked")


def _with_mask_order(
    target: Target, forward: ForwardPlan, declared: Any, docs: str, code: source_facts.CodeFacts
) -> ForwardPlan:
    """The plan with the mask's documented shape and, for a required mask, the all-keep masks to try.

    A required mask is never given None: calls that test no mask get a mask that keeps every
    key, in the first (shape, convention) the code accepts, documented ones first.
    """
    if forward.mask_name is None:
        return forward
    shape = documented_shape(docs, forward.mask_name)
    forward = replace(forward, mask_shape=shape, mask_float=documented_float(docs, forward.mask_name),
                      mask_rank=code.tiled_ranks.get(forward.mask_name))
    if not forward.mask_required:
        return forward
    if forward.caller_mask:  # what the model passes: a 4-D additive mask
        declared, shape = declared or "additive", shape or "b1qk"
    convention = declared or documented_convention(docs)
    shapes = sorted(_NEUTRAL_SHAPES, key=lambda s: s != shape)
    conventions = sorted(_NEUTRAL_CONVENTIONS, key=lambda c: c != convention)
    neutral = tuple((s, c) for c in conventions for s in shapes)
    return replace(forward, neutral=neutral)


_CHANNEL_AXIS = re.compile(r"^(_|c|ch|chs|channels?|dim|d|n_?embd|embed_dim|hidden_dim|in_channels)$", re.IGNORECASE)
_SPATIAL_AXIS = re.compile(r"^(h|w|hh|ww|height|width|img_h|img_w|h_\w+|w_\w+)$", re.IGNORECASE)


def image_layout(names: tuple[str, ...]) -> ImageLayout | None:
    """The feature-map layout an unpacking names: ``B, C, H, W = x.shape`` or ``B, H, W, C = x.shape``."""
    if len(names) != 4:
        return None
    if _CHANNEL_AXIS.match(names[1]) and all(_SPATIAL_AXIS.match(n) for n in names[2:]):
        return "bchw"
    if _CHANNEL_AXIS.match(names[3]) and all(_SPATIAL_AXIS.match(n) for n in names[1:3]):
        return "bhwc"
    return None


def _block_layout(code: source_facts.CodeFacts) -> ImageLayout | None:
    """The feature-map layout a residual block unpacks from what its norm and projections made
    (LDM's ``b, c, h, w = q.shape``): its input has that layout too, as the residual adds them."""
    return next(filter(None, map(image_layout, code.shapes_unpacked)), None)


METHOD_OUTSIDE_CLASS = (
    "a method written outside its class (its first parameter is self: a forward patched onto the classes "
    "that use it); it reads its module's own layers, so it is checked through those classes"
)
LINEAR_ATTENTION = (
    "the module computes linear (kernel) attention, a feature map ({feature_map}) on its queries and keys and no "
    "softmax, which the float64 reference does not model; the mismatch is not evidence of a mistake"
)
CONVOLUTION_ONLY = (
    "computes no attention: no softmax, attention call or product of tensors in the class, only convolution, "
    "norm and activation layers (a convolution named attention, as NextViT's multi-head convolutional attention)"
)
UPSAMPLED = (
    "its output is upsampled (a transposed convolution, nn.Upsample or a pixel shuffle): it attends over tokens a "
    "strided convolution downsampled first, which the reference does not model: it attends over the input's own "
    "tokens"
)
INPUT_RESIDUAL = (
    "forward adds its input back to what it computed (the residual of a block inside the attention class, as "
    "in a VAE or U-Net attention block), and forward itself applies no norm layer of the class to that input "
    "first: the reference models the block x + attention(norm(x)), and checks attention alone otherwise"
)


def _with_rank(target: Target, forward: ForwardPlan, code: source_facts.CodeFacts) -> ForwardPlan | str:
    """Inputs of the rank the code unpacks: a function on 3-D tensors gets 3-D ones; a class on a
    feature map (``B, C, H, W = x.shape``) gets its sequence as a 1 x seq map; a class with two batch axes
    before the tokens gets one group of them; a class whose input is unpacked into 2 or 4+ other names is
    not sequence attention the reference models."""
    first = forward.roles[0][0]
    leading = [name for name in code.unpacked.get(first, ()) if "batch" in name.lower()]
    if target.is_class and len(leading) == 2:  # SAM's ``batch_size, point_batch_size = query.shape[:2]``
        return replace(forward, rank=4)
    states = [name for name, _ in forward.roles if name in code.additive_states]
    if states:
        return (
            f"forward takes {states[0]} as one vector per example ({states[0]}.unsqueeze(1), then tanh): additive "
            "attention from a decoder state, and the reference models dot-product attention over query sequences"
        )
    rank = code.ranks.get(first)
    if rank is None:
        return forward
    if not target.is_class or forward.per_head:
        return replace(forward, rank=3) if rank == 3 else forward
    layout = image_layout(code.unpacked.get(first, ())) if [role for _, role in forward.roles] == ["x"] else None
    if layout is not None:
        return replace(forward, image=layout)
    if rank != 3:
        return (
            f"forward unpacks {first}.shape into {rank} names: a {rank}-D input, and the reference models "
            "(batch, seq, dim) sequences"
        )
    return forward


def _with_positions(target: Target, forward: ForwardPlan) -> ForwardPlan:
    """The plan with the optional forward parameter that sets positions, when there is one."""
    bound = {name for name, _ in forward.roles} | {forward.mask_name}
    for param in _call_params(target):
        if param.default is None or param.name in bound:
            continue
        lowered = param.name.lower()
        kind: PositionKind | None = (
            "ids" if lowered in POSITION_TENSOR_NAMES else "offset" if lowered in POSITION_OFFSET_NAMES else None
        )
        if kind is not None:
            return replace(forward, position_name=param.name, position_kind=kind)
    # No positions of its own: the rotary pair its caller builds carries them (the child builds it for the
    # positions the RoPE shift probe passes under that name).
    rotary = next((name for name, kind in forward.generated if kind.startswith("rotary:")), None)
    return replace(forward, position_name=rotary, position_kind="ids") if rotary else forward


def position_limit(binding: Binding) -> int | None:
    """How many positions the module's rotary cache holds as built, when the binding sets it.

    A ``max_seq_len``-like constructor argument (or a config, whose every position size is
    ``MAX_POSITIONS``) bounds the table the module indexes with positions; None: not set by us.
    """
    limits = []
    for candidate in binding.candidates:
        sizes = [v for k, v in candidate.kwargs.items() if k.lower() in POSITION_NAMES and isinstance(v, int)]
        limits.extend(sizes)
        if candidate.config is not None:
            limits.append(MAX_POSITIONS)
    return min(limits) if limits else None


def _single_head_dims(target: Target, code: source_facts.CodeFacts) -> Dims | None:
    """One head of ``head_size`` and no head count (the lecture's ``Head(n_embd, head_size)``).

    Its q, k, v and output are head_size wide, not d_model. A head width that divides the model
    width (FastViT's ``num_heads = dim // head_dim``) makes heads of that width instead.
    """
    names = {p.name.lower() for p in target.init_params}
    if names & HEAD_NAMES or names & CONFIG_NAMES or not names & HEAD_DIM_NAMES:
        return None
    if any(code.init_uses.get(p.name) == "heads" for p in target.init_params if p.name.lower() in HEAD_DIM_NAMES):
        return None
    return Dims(D_MODEL, 1, inner=D_MODEL // HEADS)


def _one_head_by_structure(target: Target, code: source_facts.CodeFacts) -> Dims | None:
    """Single-head attention: no head count in the constructor's arguments, their uses, or the
    attributes __init__ assigns (``SelfAttention(d_model)`` with q, k, v as wide as the model)."""
    if not (target.is_class and code.found):
        return None
    names = {p.name.lower() for p in target.init_params}
    counted = HEAD_NAMES | KV_HEAD_NAMES | HEAD_DIM_NAMES | CONFIG_NAMES
    if names & counted or "heads" in code.init_uses.values():
        return None
    if any(attr.lower() in counted or "head" in attr.lower() for attr in code.stored):
        return None
    return Dims(D_MODEL, 1)


def _is_per_head_class(target: Target, forward: ForwardPlan, code: source_facts.CodeFacts) -> bool:
    """A class with no size to build projections from, called on q, k, v: a scaled-dot-product core.

    Such a class (``ScaledDotProductAttention(dropout)``) is the bare function in a
    module, so it gets per-head (batch, heads, seq, head_dim) inputs. A projection-free one may take
    its inputs' width (``d_k``, ``dim_head``, ``temperature=d_k ** 0.5``): it is given the width it is fed.
    A size that defaults to None (x-transformers' ``Attend(heads=None)``, for optional talking heads)
    builds no projection. A core built from its model's config that builds no layer and turns its inputs
    from (seq, batch, heads, head_dim) itself takes per-head inputs (ChatGLM's ``CoreAttention(config)``).
    """
    if not target.is_class or [role for _, role in forward.roles] != ["query", "key", "value"]:
        return False
    sized = MODEL_DIM_NAMES | HEAD_NAMES
    if code.found and not code.builds_layers and layout.sequence_first_heads(code, forward.roles[0][0]):
        return not any(param.name.lower() in sized and param.default != "None" for param in target.init_params)
    sized |= CONFIG_NAMES
    if not (code.found and not code.builds_layers):
        sized |= HEAD_DIM_NAMES
    return not any(param.name.lower() in sized and param.default != "None" for param in target.init_params)


# A per-head class's inputs: one head as wide as the model; its width arguments are given that width.
PER_HEAD_CLASS = Dims(D_MODEL, 1)
TEMPERATURE_NAMES = frozenset({"temperature"})  # the divisor of the scores: sqrt(d_k)


def _per_head_size(name: str) -> float | None:
    """The value of a projection-free class's width argument: its inputs' width, or its square root
    for a temperature."""
    lowered = name.lower()
    width = PER_HEAD_CLASS.width // PER_HEAD_CLASS.heads
    return width if lowered in HEAD_DIM_NAMES else width**0.5 if lowered in TEMPERATURE_NAMES else None


DECLARED = "declared in pyproject.toml"


def _declared_candidate(init: Mapping[str, Any], declaration: Mapping[str, Any]) -> InitCandidate:
    dropout = tuple(name for name in init if size_for(name) == 0.0 and isinstance(init[name], float))
    kwargs = {name: (0.0 if name in dropout else value) for name, value in init.items()}
    heads = _declared_dims(init, declaration).heads
    return InitCandidate(DECLARED, kwargs, dropout_names=dropout, heads=heads)


def _declared_dims(init: Mapping[str, Any], declaration: Mapping[str, Any]) -> Dims:
    """Sizes from ``d_model`` / ``heads`` keys of the declaration, else from known names in ``init``."""
    d_model = next((v for k, v in init.items() if k.lower() in MODEL_DIM_NAMES and isinstance(v, int)), D_MODEL)
    heads = next((v for k, v in init.items() if k.lower() in HEAD_NAMES and isinstance(v, int)), HEADS)
    return Dims(int(declaration.get("d_model", d_model)), int(declaration.get("heads", heads)))


_BY_USE: dict[str, Any] = {"width": D_MODEL, "heads": HEADS, "dropout": 0.0, "positions": MAX_POSITIONS, "flag": False}


def _infer_candidates(
    target: Target, code: source_facts.CodeFacts, per_head: bool = False
) -> tuple[InitCandidate, ...] | str:
    """Every known size at its test value; then head counts left at their defaults.

    An argument whose name is not a known size gets the value its use in __init__ calls for
    (``nn.Linear(d_in, d_out)``: widths; ``feats // n_att``: a head count). The width arguments of a
    projection-free ``per_head`` class fit the width of its inputs (``PER_HEAD_CLASS``).

    The second try covers classes that insist on their default (``assert num_heads == 1``
    for a single head, ``assert num_kv_heads == 1`` for multi-query attention).
    """
    params = [p for p in target.init_params if p.name != "self" and p.kind in ("positional", "keyword")]
    kwargs: dict[str, Any] = {}
    dropout: list[str] = []
    config: dict[str, Any] | None = None
    unknown: list[str] = []
    by_use: list[str] = []
    for param in params:
        value = _per_head_size(param.name) if per_head else None
        value = size_for(param.name) if value is None else value
        if value is None and param.default is None and not _is_config(param, target):
            use = code.init_uses.get(param.name, "")
            if use == "unread":  # stored and never read: None builds the same module and claims no size
                kwargs[param.name] = None
                by_use.append(param.name)
                continue
            value = _BY_USE.get(use)
            if value is None and code.choices.get(param.name):  # ``if attention_type == "local"``
                value = code.choices[param.name][0]
            by_use += [param.name] if value is not None else []
        if value is not None:
            kwargs[param.name] = value
            if isinstance(value, float) and not isinstance(value, bool) and param.name.lower() not in TEMPERATURE_NAMES:
                dropout.append(param.name)
        elif _is_config(param, target):  # the fields it reads pick its class among its package's configs
            reads = list(code.fields_read.get(param.name, ()))
            config = {"param": param.name, "class": _config_class(param, target), "reads": reads}
        elif param.default is None:
            unknown.append(param.name)
    if unknown:
        hint_names = ", ".join(unknown)
        return f"cannot tell what to pass for constructor argument(s) {hint_names}"
    heads = 1 if per_head or _single_head_dims(target, code) or _one_head_by_structure(target, code) else HEADS
    candidates = [_candidate(kwargs, config, tuple(dropout), heads)]
    if config is not None and config["class"] is not None:
        candidates.append(_candidate(kwargs, {**config, "class": None}, tuple(dropout), HEADS))
    defaults = {p.name: p.default for p in params if p.default is not None and p.name.lower() in _COUNT_NAMES}
    if defaults:
        kept = {name: value for name, value in kwargs.items() if name not in defaults}
        heads = next((int(v) for k, v in defaults.items() if k.lower() in HEAD_NAMES and v.isdigit()), HEADS)
        candidates.append(_candidate(kept, config, tuple(dropout), heads, note="head counts at defaults"))
    widths = {n for n in kwargs if n.lower() in MODEL_DIM_NAMES | HEAD_DIM_NAMES or code.init_uses.get(n) == "width"}
    return tuple(replace(c, sets_width=bool(widths & set(c.kwargs)), by_use=tuple(by_use)) for c in candidates)


_COUNT_NAMES = HEAD_NAMES | KV_HEAD_NAMES


def _candidate(
    kwargs: Mapping[str, Any],
    config: Mapping[str, Any] | None,
    dropout: tuple[str, ...],
    heads: int,
    note: str = "",
) -> InitCandidate:
    label = ", ".join(f"{k}={v}" for k, v in kwargs.items()) or "no arguments"
    if config is not None:
        made = {None: "namespace", PACKAGE_CONFIG: "its package's config class"}.get(config["class"], config["class"])
        built = f"{config['param']}={made}(small sizes)"
        label = built + (f", {label}" if kwargs else "")
    if note:
        label += f" ({note})"
    return InitCandidate(label, dict(kwargs), config=config, dropout_names=dropout, heads=heads)


def _is_config(param: Parameter, target: Target) -> bool:
    if param.name.lower() in CONFIG_NAMES:
        return True
    annotation = (param.annotation or "").strip("'\"")
    return bool(target.config_class and annotation == target.config_class) or annotation.endswith("Config")


PACKAGE_CONFIG = "*"
"""An unannotated ``config`` with no config class in its file: the child looks for the ``*Config``
class the module imports from its own package (``GPTNeoConfig`` beside ``GPTNeoSelfAttention``)."""


def _config_class(param: Parameter, target: Target) -> str | None:
    """The config class a constructor's annotation names; the first of a union (Dia's
    ``DiaEncoderConfig | DiaDecoderConfig``, ``Optional[...]``, ``Union[...]``)."""
    annotation = (param.annotation or "").strip("'\"")
    annotation = re.sub(r"^(?:Optional|Union)\[(.*)\]$", r"\1", annotation).replace(",", "|").split("|")[0].strip()
    if re.fullmatch(r"[A-Za-z_]\w*", annotation) and annotation not in ("dict", "Any", "object"):
        return annotation
    return target.config_class or PACKAGE_CONFIG


def cache_param(target: Target) -> str | None:
    """The optional forward parameter that takes a (k, v) KV cache (``past_key_value=None``...), if any.

    One annotated with a cache class (transformers' ``Cache``: an object with ``update``) takes no tuple.
    """
    optional = {
        p.name.lower(): p.name
        for p in _call_params(target)
        if p.default is not None and not re.search(r"\bCache\b", p.annotation or "")
    }
    return next((optional[name] for name in CACHE_NAMES if name in optional), None)


def _mask_param(target: Target, params: list[Parameter]) -> Parameter | None:
    by_name = {p.name: p for p in params}
    if target.mask_param in by_name:
        return by_name[target.mask_param]
    for name in MASK_NAMES:
        if name in by_name:
            return by_name[name]
    return next(
        (p for p in params if re.search("mask|padding", p.name, re.IGNORECASE) and "head" not in p.name.lower()),
        None,
    )


def _dropout_extras(params: list[Parameter]) -> dict[str, Any]:
    return {p.name: 0.0 for p in params if p.default not in (None, "None") and p.name.lower() in DROPOUT_NAMES}


def _infer_forward(target: Target, code: source_facts.CodeFacts) -> ForwardPlan | str:
    params = _call_params(target)
    if not params and not target.forward_params:
        return "no forward signature was found"
    mask = _mask_param(target, params)
    rotary = _rotary_pair(target, code) + _from_caller(target, params)
    built = dict(rotary)
    required = [
        p for p in params if p.default is None and p is not mask and p.kind == "positional" and p.name not in built
    ]
    named = _roles_by_name(required, code)
    generated: tuple[tuple[str, str], ...] = rotary
    if named is not None:
        roles, extra = named
    else:
        generated += _generated_inputs([p.name for p in required], code)
        names = [p.name for p in required if p.name not in dict(generated)]
        supplied = [name for name in names if _CALLER_BIAS.search(name)]
        if supplied:
            return (
                f"forward takes {', '.join(supplied)}: an attention bias its model computes and passes in "
                "(BLOOM's ALiBi), which the reference cannot model from the class alone"
            )
        others = [name for name in names if NOT_HIDDEN.search(name)]
        if others:
            return f"forward needs {', '.join(others)}, which are not hidden states: cannot tell what to pass"
        by_count = _roles_by_count(names)
        if isinstance(by_count, str):
            return by_count
        roles, extra = by_count, {}
    if not target.is_class and [role for _, role in roles] == ["x"]:
        return "a function of one tensor is not an attention function on (q, k, v)"
    if not target.is_class:
        extra = {**_dropout_extras(params), **extra}
    mask_name = mask.name if mask else None
    required_mask = bool(mask and mask.default is None)
    caller_mask = bool(mask and mask.name == "attention_mask" and target.is_class and code.causal_by_caller)
    return ForwardPlan(roles, mask_name, required_mask, extra, generated=generated, caller_mask=caller_mask)


SCALE_ARGUMENT_NAMES = frozenset({"scaling", "scale", "softmax_scale", "sm_scale"})


def _from_caller(target: Target, params: list[Parameter]) -> tuple[tuple[str, str], ...]:
    """What a layer hands the attention function it dispatches to (transformers'
    ``eager_attention_forward(module, query, key, value, attention_mask, scaling)``): the calling
    ``module`` (``"caller-module"``: one holding ``num_key_value_groups`` for the inputs' heads) and a
    required ``scaling`` (``"scale"``: 1/sqrt(head_dim) of the query)."""
    if target.is_class:
        return ()
    built = []
    for param in params:
        if param.default is not None:
            continue
        annotation = param.annotation or ""
        if param.name == "module" or annotation.endswith("nn.Module"):
            built.append((param.name, "caller-module"))
        elif param.name.lower() in SCALE_ARGUMENT_NAMES:
            built.append((param.name, "scale"))
    return tuple(built)


_CALLER_BIAS = re.compile(r"alibi|position_bias|attn_bias|attention_bias", re.IGNORECASE)
ROTARY_PAIR_NAMES = frozenset({"position_embeddings", "position_embedding", "rotary_pos_emb", "cos_sin"})
_ROTARY_CLASS = re.compile(r"Rotary\w*Embedding$|RotaryEmb$|RoPE$", re.IGNORECASE)


def _rotary_pair(target: Target, code: source_facts.CodeFacts) -> tuple[tuple[str, str], ...]:
    """A (cos, sin) pair the caller computes once per model (transformers' ``position_embeddings``),
    built by the file's own rotary class from the same config as the module: ``rotary:<class>``.

    Optional in the signature (``= None``) but unpacked unconditionally, so it is always passed.
    """
    if not (target.is_class and any(_is_config(p, target) for p in target.init_params)):
        return ()
    rotary = next((name for name in sorted(code.config_classes) if _ROTARY_CLASS.search(name)), None)
    if rotary is None:
        return ()
    params = [p.name for p in _call_params(target) if p.name.lower() in ROTARY_PAIR_NAMES]
    return tuple((name, f"rotary:{rotary}") for name in params[:1])


_FREQS_HELPER = re.compile(r"freqs_cis|precompute_freqs|precompute_rope", re.IGNORECASE)
ALIBI_HELPER = "build_alibi_tensor"  # transformers' BLOOM and Falcon: (attention_mask, num_heads, dtype)
RESIDUAL_NAMES = frozenset({"residual"})  # a tensor the layer adds to its output (BLOOM's dropout_add)


def _generated_inputs(names: list[str], code: source_facts.CodeFacts) -> tuple[tuple[str, str], ...]:
    """Required inputs the child can build: position ids, a start offset, ``freqs_cis`` from the
    file's own helper (``precompute_freqs_cis(head_dim, seq_len)``), the ``alibi`` bias its model
    builds with the file's ``build_alibi_tensor`` (``alibi:<helper>``; the reference then reads the
    standard slopes), and zeros for a ``residual`` the layer adds to its output."""
    helper = next((name for name in sorted(code.functions) if _FREQS_HELPER.search(name)), None)
    built: list[tuple[str, str]] = []
    for name in names:
        lowered = name.lower()
        if lowered in POSITION_TENSOR_NAMES:
            built.append((name, "ids"))
        elif lowered in POSITION_OFFSET_NAMES:
            built.append((name, "offset"))
        elif "freqs_cis" in lowered and helper is not None:
            built.append((name, helper))
        elif lowered == "alibi" and ALIBI_HELPER in code.functions:
            built.append((name, f"alibi:{ALIBI_HELPER}"))
        elif lowered in RESIDUAL_NAMES:
            built.append((name, "zeros"))
    return tuple(built)


def _roles_by_count(names: list[str]) -> tuple[tuple[str, Role], ...] | str:
    """One tensor: x; two: query and key/value; three: query, key, value."""
    by_count: dict[int, tuple[Role, ...]] = {1: ("x",), 2: ("query", "kv"), 3: ("query", "key", "value")}
    if len(names) not in by_count:
        what = "no tensor argument" if not names else f"{len(names)} required arguments ({', '.join(names)})"
        return f"forward takes {what}: cannot tell which are query, key and value"
    return tuple(zip(names, by_count[len(names)], strict=True))


def _roles_by_name(
    required: list[Parameter], code: source_facts.CodeFacts
) -> tuple[tuple[tuple[str, Role], ...], dict[str, Any]] | None:
    """Roles from the arguments' names (``values, keys, query``), when they name a whole role set.

    Other required arguments that the code compares with None (``if alibi is None``) get None;
    None when the names do not settle the roles (the count decides then).
    """
    roles = [(p.name, _NAMED_ROLES[p.name.lower()]) for p in required if p.name.lower() in _NAMED_ROLES]
    kinds = {role for _, role in roles}
    if kinds == {"x", "kv"}:
        roles = [(name, "query" if role == "x" else role) for name, role in roles]
        kinds = {"query", "kv"}
    rest = [p.name for p in required if p.name.lower() not in _NAMED_ROLES]
    if len(kinds) != len(roles) or kinds not in _ROLE_SETS or not all(name in code.none_checked for name in rest):
        return None
    return tuple(roles), dict.fromkeys(rest)


def _declared_forward(target: Target, forward: Any) -> ForwardPlan | str:
    """Roles given in the order of the forward parameters: the i-th role goes to the i-th parameter."""
    if not isinstance(forward, list) or not all(isinstance(item, str) for item in forward):
        return 'forward must be a list of roles such as ["query", "key", "value", "mask"]'
    params = _call_params(target)
    if len(forward) > len(params):
        return f"forward declares {len(forward)} roles but the signature has {len(params)} parameters"
    roles: list[tuple[str, Role]] = []
    mask: Parameter | None = None
    for item, param in zip(forward, params, strict=False):
        role = _ROLE_ALIASES.get(item.lower())
        if role is None:
            return f'unknown forward role "{item}" (known: {", ".join(sorted(_ROLE_ALIASES))})'
        if role == "mask":
            mask = param
        else:
            roles.append((param.name, role))
    kinds = [role for _, role in roles]
    if kinds not in (["x"], ["query", "kv"], ["query", "key", "value"]):
        return "forward roles must be [x], [query, kv] or [query, key, value], with an optional mask"
    return ForwardPlan(tuple(roles), mask.name if mask else None, bool(mask and mask.default is None))
