"""Standalone rotary functions (``apply_rotary_pos_emb(q, k, cos, sin, position_ids=None)``) as targets.

Such a function has no hidden states to bind, so it gets its own plan: the
parent builds the basis-vector probe (``rope.basis_inputs``: e_0..e_{dh-1} at
positions 0..P) and cos/sin tables in every layout a caller might pass (half-split
``cat(freqs, freqs)``, interleaved ``repeat_interleave(freqs, 2)``, half-width
tables that the function expands itself; 2-D or batched; q/k laid out as
(b, h, s, d), (b, s, h, d) or sequence-first (s, b, h, d) as ChatGLM's). A function that takes one table instead
(Meta's ``apply_rotary_emb(xq, xk, freqs_cis)``) gets Meta's complex
``freqs_cis`` (``torch.polar(ones, outer(positions, inv_freq))``, (P+1, dh/2),
complex64, reshaped for broadcasting by the function itself), the real angles, or ChatGLM's
``rope_cache`` of cos and sin stacked per pair, (P+1, dh/2, 2).
The child calls the function once per variant, each free to fail. The parent
reads the rotation back with ``rope.fingerprint``: a variant that is a correct
rotation passes and names the convention; otherwise the fingerprint names the
defect (ATT402), and a function that raises on every variant with a broadcast
error is ATT403, with the shapes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from attncheck.dynamic.binding.bind import Binding
from attncheck.dynamic.diagnosis import crashes
from attncheck.dynamic.harness.protocol import Experiment, ReplyFacts
from attncheck.dynamic.reference.rope import Fingerprint, basis_inputs, fingerprint, inv_freq, relative_shift_error
from attncheck.findings import Check, Target

HEAD_DIM = 8
MAX_POSITION = 4  # positions 0..4: five, which differs from HEAD_DIM, so no axis is ambiguous
SHIFT_TOLERANCE = 1e-5  # the fingerprint's own tolerance: q·k of unit vectors, float32 tables included
_COS = re.compile(r"^(cos|cos_\w*|\w*_cos)$", re.IGNORECASE)
_SIN = re.compile(r"^(sin|sin_\w*|\w*_sin)$", re.IGNORECASE)
_FREQS = re.compile(r"^(freqs?(_cis)?|\w*_freqs_cis|pos_cis|rotary_emb|freqs_complex|rope_cache)$", re.IGNORECASE)
_POSITIONS = re.compile(r"position_ids|positions|pos_ids", re.IGNORECASE)
TABLES = {
    "half": "cos/sin as cat(freqs, freqs) (half-split)",
    "interleaved": "cos/sin as repeat_interleave(freqs, 2) (interleaved)",
    "narrow": "cos/sin of width head_dim/2 (the function expands them)",
    "complex": "freqs_cis as complex64 (seq, head_dim/2) from torch.polar (Meta)",
    "angles": "freqs as real (seq, head_dim/2) angles",
    "angles-half": "freqs as real (seq, head_dim) angles, cat(freqs, freqs) (half-split)",
    "angles-interleaved": "freqs as real (seq, head_dim) angles, repeat_interleave(freqs, 2) (interleaved)",
    "cache": "a rope_cache of (seq, head_dim/2, 2): cos and sin stacked per pair (ChatGLM)",
}
COS_SIN_TABLES = ("half", "interleaved", "narrow")
FREQS_TABLES = ("complex", "angles", "angles-half", "angles-interleaved", "cache")
FULL_ANGLES = ("angles-half", "angles-interleaved")  # also given batched: (1, seq, head_dim), as x-transformers' are
# How q/k are laid out, with the permutation of the basis probe's (b, h, s, d) that gives each layout.
LAYOUTS = {"bhsd": (0, 1, 2, 3), "bshd": (0, 2, 1, 3), "sbhd": (2, 0, 1, 3)}


@dataclass
class RopePlan:
    """The request unit of a rotary function and the parent's record of its variants."""

    binding: Binding
    unit: dict[str, Any]
    tensors: dict[str, np.ndarray]
    variants: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> {table, layout}


def _params(target: Target) -> list[str]:
    return [p.name for p in target.forward_params if p.kind in ("positional", "keyword")]


def _is_table(name: str) -> bool:
    return bool(_COS.match(name) or _SIN.match(name) or _FREQS.match(name))


def _takes_freqs(names: list[str]) -> bool:
    """One rotation table (Meta's ``freqs_cis``) instead of cos and sin."""
    return any(_FREQS.match(n) for n in names) and not any(_COS.match(n) or _SIN.match(n) for n in names)


def applies(target: Target) -> bool:
    """A bare function that rotates one or two tensors with cos and sin tables, or with one freqs_cis table."""
    if target.is_class or "rope" not in target.kinds:
        return False
    names = _params(target)
    if _takes_freqs(names):
        return len(names) >= 2
    return any(_COS.match(n) for n in names) and any(_SIN.match(n) for n in names) and len(names) >= 3


def _angles() -> torch.Tensor:
    """(P+1, dh/2) rotation angles: position times base^(-2i/dh)."""
    positions = torch.arange(MAX_POSITION + 1, dtype=torch.float64)
    return positions[:, None] * inv_freq(HEAD_DIM, 10000.0)


def _freqs_table(table: str) -> torch.Tensor:
    """Meta's complex64 freqs_cis (P+1, dh/2), the real angles it is made of, or ChatGLM's stacked
    (P+1, dh/2, 2) cos and sin."""
    angles = _angles()
    if table == "cache":
        return torch.stack([angles.cos(), angles.sin()], dim=-1)
    if table == "angles":
        return angles
    if table == "angles-half":
        return torch.cat([angles, angles], dim=-1)
    if table == "angles-interleaved":
        return angles.repeat_interleave(2, dim=-1)
    return torch.polar(torch.ones_like(angles), angles).to(torch.complex64)


def _tables(table: str, batched: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(P+1, w) cos and sin (or (1, P+1, w) when batched) for one layout."""
    freqs = _angles()
    if table == "half":
        freqs = torch.cat([freqs, freqs], dim=-1)
    elif table == "interleaved":
        freqs = freqs.repeat_interleave(2, dim=-1)
    cos, sin = freqs.cos(), freqs.sin()
    return (cos[None], sin[None]) if batched else (cos, sin)


def _table_inputs(table: str, batched: bool, prefix: str) -> dict[str, tuple[str, np.ndarray]]:
    """The tables of one variant, by kind (``cos``, ``sin`` or ``freqs``): (tensor name, value)."""
    key = f"{table}/{'b' if batched else '2d'}"
    if table in FREQS_TABLES:
        freqs = _freqs_table(table)
        return {"freqs": (f"{prefix}/freqs/{key}", (freqs[None] if batched else freqs).numpy())}
    cos, sin = _tables(table, batched)
    return {"cos": (f"{prefix}/cos/{key}", cos.numpy()), "sin": (f"{prefix}/sin/{key}", sin.numpy())}


def _kind(name: str) -> str:
    return "cos" if _COS.match(name) else "sin" if _SIN.match(name) else "freqs"


def plan(target: Target, index: int) -> RopePlan:
    """Every variant of calling the function on the basis-vector probe."""
    prefix = str(index)
    names = _params(target)
    required = [p.name for p in target.forward_params if p.default is None and p.kind == "positional"]
    tensor_params = [n for n in required if not (_is_table(n) or _POSITIONS.search(n))]
    position_param = next((n for n in names if _POSITIONS.search(n)), None)
    x, _ = basis_inputs(HEAD_DIM, MAX_POSITION)  # (1, dh, P+1, dh): (b, h, s, d)
    tensors: dict[str, np.ndarray] = {f"{prefix}/x/{name}": x.permute(*order).contiguous().numpy()
                                      for name, order in LAYOUTS.items()}
    tensors[f"{prefix}/positions"] = np.arange(MAX_POSITION + 1)[None]
    ordered = [n for n in names if n in tensor_params[:2] or _is_table(n)]
    tensor_roles = dict(zip(tensor_params[:2], ("query", "key") if len(tensor_params) > 1 else ("x",), strict=False))
    roles = [[n, tensor_roles.get(n, n)] for n in ordered]
    tables = FREQS_TABLES if _takes_freqs(names) else COS_SIN_TABLES
    experiments, variants = [], {}
    for table in tables:
        for batched in (False, True) if table in (*COS_SIN_TABLES, *FULL_ANGLES) else (False,):
            by_kind = _table_inputs(table, batched, prefix)
            tensors.update(dict(by_kind.values()))
            key = f"{table}/{'b' if batched else '2d'}"
            for layout in LAYOUTS:
                for use_positions in (False, True) if position_param else (False,):
                    name = f"rope/{key}/{layout}{'/ids' if use_positions else ''}"
                    inputs = {}
                    for param, role in roles:
                        if role in ("query", "key", "x"):
                            inputs[role] = f"{prefix}/x/{layout}"
                        else:
                            inputs[role] = by_kind[_kind(param)][0]
                    keywords = {position_param: f"{prefix}/positions"} if use_positions else {}
                    experiments.append(Experiment(name, inputs, keywords=keywords, all_outputs=True).to_request())
                    variants[name] = {"table": table, "layout": layout}
    unit = {
        "name": target.name,
        "is_class": False,
        "independent": True,
        "candidates": [],
        "forward": {"roles": roles, "mask_name": None, "mask_required": False, "extra": {}},
        "experiments": experiments,
    }
    return RopePlan(Binding(target), unit, tensors, variants)


def _images(output: torch.Tensor, layout: str) -> torch.Tensor | None:
    """(P+1, dh, dh) images of the basis vectors, or None when the output has another shape."""
    order = LAYOUTS[layout]
    planned = (1, HEAD_DIM, MAX_POSITION + 1, HEAD_DIM)  # the basis probe's (b, h, s, d)
    if tuple(output.shape) != tuple(planned[axis] for axis in order):
        return None
    back = tuple(order.index(axis) for axis in range(4))  # the output's axes in (b, h, s, d) order
    return output.permute(*back)[0].transpose(0, 1)


# DeepSeek's ``apply_rotary_pos_emb_interleave`` rotates interleaved pairs (x0, x1), (x2, x3)... and
# writes the results out half-split (all first members, then all second members). q and k are
# permuted alike, so q·k is that of interleaved RoPE; read back in interleaved order, it is one.
DEINTERLEAVED = "interleaved pairs written out half-split (DeepSeek's layout: q and k permuted alike, q·k unchanged)"


def _interleaved_order(head_dim: int) -> torch.Tensor:
    """The output dims in interleaved order when they were written half-split: 0, h, 1, h+1, ..."""
    half = head_dim // 2
    return torch.stack([torch.arange(half), torch.arange(half) + half], dim=1).flatten()


def _variant_print(
    name: str, layout: str, tensors: dict[str, torch.Tensor], deinterleave: bool = False
) -> tuple[Fingerprint, float] | None:
    """The fingerprint of one variant's rotation and its relative-position error; None when unreadable.

    A function that rotates q and k returns both: each must be a correct rotation, and
    q·k must depend only on the distance between positions (k conjugated, or rotated with
    other frequencies than q, breaks that although q alone looks right). ``deinterleave``
    reads the outputs' dims back in interleaved order first (``DEINTERLEAVED``).
    """
    images = _images(tensors[f"{name}/out"], layout)
    keys = _images(tensors[f"{name}/out1"], layout) if f"{name}/out1" in tensors else None
    if images is None:
        return None
    if deinterleave:
        order = _interleaved_order(HEAD_DIM)
        images, keys = images[..., order], keys[..., order] if keys is not None else None
    try:
        found = fingerprint(images)
        key_print = fingerprint(keys) if keys is not None else None
    except ValueError:
        return None
    shift = relative_shift_error(images, keys=keys)
    if found.code is not None or key_print is None:
        return found, shift
    if key_print.code is not None:
        return replace(key_print, message=f"k is rotated differently from q: {key_print.message}"), shift
    if shift > SHIFT_TOLERANCE:
        message = (
            f"q and k are rotated by different rules (q: {found.message}; k: {key_print.message}), so q·k "
            f"depends on absolute positions (relative-position error {shift:.3g}): rotate both with the same table"
        )
        return replace(found, code="ATT402", message=message), shift
    return found, shift


def _deinterleaved(
    rope_plan: RopePlan, experiments: dict[str, Any], tensors: dict[str, torch.Tensor]
) -> list[tuple[str, Fingerprint, float, str]]:
    """The variants that are a correct interleaved rotation once read in interleaved order."""
    found = []
    for name, variant in rope_plan.variants.items():
        if experiments.get(name, {}).get("ok"):
            read = _variant_print(name, variant["layout"], tensors, deinterleave=True)
            if read is not None and read[0].code is None and read[0].convention == "interleaved":
                found.append((name, read[0], read[1], f", {DEINTERLEAVED}"))
    return found


def judge(
    rope_plan: RopePlan, facts: ReplyFacts, tensors: dict[str, torch.Tensor], source_text: str
) -> tuple[list[Check], str | None, str]:
    """The checks of a rotary function, and the code and message of its finding (None: passed)."""
    experiments = facts.get("experiments", {})
    prints: list[tuple[str, Fingerprint, float]] = []
    for name, variant in rope_plan.variants.items():
        if experiments.get(name, {}).get("ok"):
            found = _variant_print(name, variant["layout"], tensors)
            if found is not None:
                prints.append((name, *found))
    good = [(n, f, s, "") for n, f, s in prints if f.code is None] or _deinterleaved(rope_plan, experiments, tensors)
    if good:
        name, found, shift, layout = good[0]
        detail = (
            f"{found.message}{layout}; called with {TABLES[rope_plan.variants[name]['table']]}; "
            f"relative-position error {shift:.3g}"
        )
        return [Check("rope-fingerprint", "passed", detail)], None, ""
    if prints:
        same_layout = [(n, f, s) for n, f, s in prints if f.convention == rope_plan.variants[n]["table"]]
        name, found, shift = (same_layout or prints)[0]
        detail = f"{found.message}; relative-position error {shift:.3g}"
        tables = "freqs table" if rope_plan.variants[name]["table"] in FREQS_TABLES else "cos/sin layout"
        message = f"the rotary embedding is wrong with every {tables}: {found.message}"
        return [Check("rope-fingerprint", "failed", detail)], "ATT402", message
    errors = [e["error"] for e in experiments.values() if not e.get("ok")]
    lines = source_text.splitlines()
    for error in errors:
        line = lines[error["line"] - 1] if error.get("line") and 0 < error["line"] <= len(lines) else ""
        named = crashes.classify(error["type"], error["message"], line, HEAD_DIM)
        if named is not None and named.code == "ATT403":
            return [Check("rope-fingerprint", "failed", error["message"])], named.code, named.message
    first = errors[0] if errors else {"type": "Error", "message": "no output"}
    reason = f"no way of calling it worked: {first['type']}: {first['message']}"
    return [Check("rope-fingerprint", "skipped", reason)], None, ""
