"""Runs inside the child: what a built module declares about its variant, read like its weights.

A module holds the parameters of its variant as it holds its projections: ``rope_theta`` and
``rope_scaling`` on itself or its config, an ``inv_freq`` buffer, a ``sliding_window``, a
soft-cap, a declared ``scaling``, ALiBi slopes, ``sinks``, ``q_norm``/``k_norm`` layers, a T5
``relative_attention_bias`` table. This module only reads them (plain JSON facts plus float64
tensors); the parent (``reference.variant_fit``) decides what they mean. It also names the constructs
the reference does not model (MLA latent projections, differential attention...), so that a
mismatch on such a module is reported as skipped with the construct's name, not as ATT903.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch
from torch import nn

from attncheck.dynamic.reference.variant_fit import DECLARED_AS, is_positive

SCALARS = (
    "rope_theta", "base", "rotary_base", "rotary_emb_base", "partial_rotary_factor", "rotary_pct", "rotary_dim",
    "max_position_embeddings", "sliding_window", "window_size", "attention_chunk_size", "chunk_size",
    "softcap", "attn_logit_softcapping", "logit_softcap", "scaling", "scale", "softmax_scale",
    "query_pre_attn_scalar", "relative_attention_num_buckets", "relative_attention_max_distance",
    "is_decoder", "has_relative_attention_bias", "alibi", "use_alibi", "alibi_form", "attention_scaling",
    "use_sliding_window", "lambda_init",
)  # fmt: skip
"""Attribute names whose number (or flag) says what the variant is, on the module or its config."""

DICTS = ("rope_scaling", "rope_parameters")

ALIASES = (
    (re.compile(r"(?:(?:attn|attention|local|sliding|swa)_)*window(?:_(?:size|len|length))?"), "sliding_window"),
    (re.compile(r"(?:(?:attn|attention|logits?|tanh)_)*soft_?(?:cap|capping|clamp)(?:_(?:value|val))?"), "softcap"),
)
"""Other spellings of a window and a soft-cap (``self.window``, ``local_window_size``, ``attn_softcap``,
x-transformers' ``logit_softclamp_value``), each read as the canonical name when that one is absent:
a module declares its window whatever it calls it. Only a positive number is taken, so a 2-D window
(Swin's list) or a flag (``softclamp_logits``) is not. The name the module used is kept under
``DECLARED_AS``, for the messages."""

LAMBDAS = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2", "lambda_a", "lambda_b")
"""Differential attention's λ parameters (``reference.differential`` reads them back by these names)."""

UNMODELLED = {
    "kv_a_proj_with_mqa": "MLA latent key/value projections (DeepSeek-V2/V3)",
    "kv_lora_rank": "MLA latent key/value projections (DeepSeek-V2/V3)",
    "feature_map": "linear attention (a kernel feature map instead of softmax)",
    "block_table": "paged KV cache (block_table)",
    "mrope_section": "multimodal M-RoPE position streams (mrope_section)",
    "kernel_size": "a 2-D neighbourhood mask (NATTEN-style kernel_size)",
    "document_ids": "a document (packed-sequence) mask that needs the document ids",
    "prefix_length": "a prefix-LM mask that needs the prefix length",
}
"""Attribute names that show a construct the reference does not model, with its description."""

NORM_NAMES = {
    "q": ("q_norm", "query_norm", "q_layernorm", "norm_q", "query_layernorm"),
    "k": ("k_norm", "key_norm", "k_layernorm", "norm_k", "key_layernorm"),
}


def _config_of(instance: nn.Module) -> Any:
    for name in ("config", "cfg", "args", "params"):
        value = getattr(instance, name, None)
        if value is not None and not isinstance(value, (nn.Module, torch.Tensor, int, float, str)):
            return value
    return None


def _plain(value: Any) -> Any:
    """A JSON-able copy of a number, flag, list of numbers, or dict of those and short names; None otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and math.isfinite(value):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return list(value)
    if isinstance(value, dict):  # rope_scaling: numbers, factor lists and the scheme's name
        return {str(k): v if isinstance(v, str) else _plain(v) for k, v in value.items() if _plain_or_name(v)}
    return None


def _plain_or_name(value: Any) -> bool:
    return (isinstance(value, str) and len(value) < 64) or _plain(value) is not None


def _scalars(owner: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """The owner's variant numbers by canonical name, and the names it used for those read by an alias."""
    found: dict[str, Any] = {}
    for name in SCALARS + DICTS:
        value = _plain(getattr(owner, name, None))
        if value is not None and (name in DICTS) == isinstance(value, dict):
            found[name] = value
    aliased: dict[str, str] = {}
    for name, value in _attributes(owner).items():
        canonical = next((c for pattern, c in ALIASES if pattern.fullmatch(name)), None)
        if canonical is not None and canonical not in found and is_positive(value):
            found[canonical], aliased[canonical] = value, name
    return found, aliased


def _attributes(owner: Any) -> dict[str, Any]:
    """The instance attributes of a module or config object, {} for one without a ``__dict__``."""
    try:
        return dict(vars(owner))
    except TypeError:
        return {}


def _norm(layer: nn.Module, out: dict[str, torch.Tensor], key: str) -> dict[str, Any] | None:
    """A q/k norm layer as the parent rebuilds it: RMS or layer norm, eps, affine weight and bias."""
    weight = getattr(layer, "weight", None)
    eps = next((getattr(layer, n) for n in ("eps", "variance_epsilon", "epsilon") if hasattr(layer, n)), None)
    if not isinstance(weight, torch.Tensor) or weight.ndim != 1 or not isinstance(eps, (int, float)):
        return None
    kind = "layer" if isinstance(layer, nn.LayerNorm) else "group" if isinstance(layer, nn.GroupNorm) else "rms"
    out[f"{key}/weight"] = weight.detach().to("cpu", torch.float64)
    bias = getattr(layer, "bias", None)
    if isinstance(bias, torch.Tensor):
        out[f"{key}/bias"] = bias.detach().to("cpu", torch.float64)
    offset = 1.0 if type(layer).__name__.startswith("Gemma") else 0.0  # Gemma's RMSNorm scales by 1 + weight
    groups = layer.num_groups if isinstance(layer, nn.GroupNorm) else 1
    return {"kind": kind, "eps": float(eps), "bias": isinstance(bias, torch.Tensor), "offset": offset, "groups": groups}


def _is_token_norm(layer: nn.Module) -> bool:
    """A layer or RMS norm over each token's features (not a batch or group norm, whose statistics span tokens)."""
    return isinstance(layer, nn.LayerNorm) or type(layer).__name__.lower().endswith(("rmsnorm", "layernorm"))


def _tensors(instance: nn.Module, out: dict[str, torch.Tensor]) -> list[str]:
    """Buffers and parameters that carry a variant, copied into ``out`` under ``declared/<role>``."""
    roles = []
    named = list(instance.named_buffers()) + list(instance.named_parameters())
    for path, tensor in named:
        leaf = path.rsplit(".", 1)[-1].lower()
        role = None
        if leaf == "inv_freq" and tensor.ndim == 1:
            role = "inv_freq"
        elif ("slope" in leaf or leaf == "alibi") and tensor.ndim >= 1:
            role = "alibi_slopes"
        elif leaf in ("sinks", "sink", "attention_sinks") and tensor.ndim == 1:
            role = "sinks"
        elif leaf == "relative_position_bias_table" and tensor.ndim == 2:
            role = "relative_table"
        elif leaf == "relative_position_index":
            role = "relative_index"
        elif leaf == "temperature" and tensor.is_floating_point():  # XCiT's per-head channel temperature
            role = "temperature"
        elif leaf in LAMBDAS and tensor.is_floating_point():  # differential attention's λ
            role = leaf
        if role and f"declared/{role}" not in out:
            out[f"declared/{role}"] = tensor.detach().to("cpu", torch.float64 if tensor.is_floating_point() else None)
            roles.append(role)
    for path, layer in instance.named_modules():
        if path.rsplit(".", 1)[-1] == "relative_attention_bias" and isinstance(layer, nn.Embedding):
            out["declared/t5_table"] = layer.weight.detach().to("cpu", torch.float64)
            roles.append("t5_table")
            break
    return roles


def declared_scalars(instance: nn.Module) -> dict[str, Any]:
    """The variant's numbers and flags: of its submodules, then its config, then the module itself
    (a later one wins: a rotary submodule's base and attention_scaling give way to the module's)."""
    config = _config_of(instance)
    owners = [*reversed(list(instance.modules())[1:]), *([config] if config is not None else []), instance]
    scalars: dict[str, Any] = {}
    names: dict[str, str] = {}
    for owner in owners:
        found, aliased = _scalars(owner)
        scalars.update(found)
        for canonical in found:  # a later owner's value wins, and with it the name it used
            names.pop(canonical, None)
        names.update(aliased)
    if names:
        scalars[DECLARED_AS] = names
    return scalars


def declarations(instance: nn.Module, out: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The variant facts of a built module: scalars of the module, its config, then its submodules
    (in that priority),
    the tensors that carry a variant, its q/k norm layers, and the unmodelled constructs it shows."""
    config = _config_of(instance)
    scalars = declared_scalars(instance)
    norms = {}
    children = dict(instance.named_children())
    for role, names in NORM_NAMES.items():
        layer = next((children[n] for n in names if n in children), None)
        described = _norm(layer, out, f"declared/{role}_norm") if layer is not None else None
        if described is not None:
            norms[role] = described
    post_norms = {}
    for name, layer in children.items():  # a norm the forward may apply to its output plus its input (TVP)
        if name in NORM_NAMES["q"] + NORM_NAMES["k"] or not _is_token_norm(layer):
            continue
        described = _norm(layer, out, f"declared/post/{name}")
        if described is not None:
            post_norms[name] = described
    pre_norms = {}
    for name, layer in children.items():  # a norm a residual block's forward may apply to its input (VAE, U-Net)
        if not (_is_token_norm(layer) or isinstance(layer, nn.GroupNorm)):
            continue
        described = _norm(layer, out, f"declared/pre/{name}")
        if described is not None:
            pre_norms[name] = described
    seen = {name for name, _ in instance.named_modules()} | set(vars(instance))
    if config is not None:
        seen |= set(vars(config)) if hasattr(config, "__dict__") else set()
    leaves = {name.rsplit(".", 1)[-1] for name in seen}
    unmodelled = sorted({why for name, why in UNMODELLED.items() if name in leaves})
    return {
        "scalars": scalars, "tensors": _tensors(instance, out), "norms": norms, "post_norms": post_norms,
        "pre_norms": pre_norms,
        "unmodelled": unmodelled,
    }
