"""Hand-written attention "as a student would write it", with one switch per known bug.

This code is deliberately independent of ``attncheck.dynamic.reference.mutants``: it uses
nn.Linear-style ``functional.linear``, ``view``/``transpose`` and ``masked_fill`` the way user
code does, so the diagnosis tests compare two separate implementations and can fail.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional

from attncheck.dynamic.reference.mha import Linear, Projections

BUGS = {
    # bug switch -> catalogue code the diagnosis must name
    "no_proj": "ATT101",
    "no_q_proj": "ATT101",
    "no_v_proj": "ATT101",
    "no_out_proj": "ATT102",
    "split_view": "ATT104",
    "merge_view": "ATT105",
    "scale_d_model": "ATT201",
    "scale_seq_len": "ATT201",
    "no_scale": "ATT201",
    "scale_multiplied": "ATT201",
    "scaled_twice": "ATT201",
    "softmax_dim_queries": "ATT202",
    "softmax_dim_heads": "ATT202",
    "scale_after_softmax": "ATT203",
    "mask_after_softmax": "ATT203",
    "mask_multiplied": "ATT301",
    "mask_added": "ATT301",
    "mask_inverted": "ATT304",
    "causal_hides_self": "ATT305",
    "causal_sees_next": "ATT305",
    "gqa_tiled": "ATT401",
}


def random_projections(d_in: int, d_model: int, kv_width: int, gen: torch.Generator) -> Projections:
    def linear(out_f: int, in_f: int) -> Linear:
        weight = torch.randn(out_f, in_f, generator=gen, dtype=torch.float64) / math.sqrt(in_f)
        return Linear(weight, torch.randn(out_f, generator=gen, dtype=torch.float64) * 0.1)

    return Projections(
        linear(d_model, d_in), linear(kv_width, d_in), linear(kv_width, d_in), linear(d_model, d_model)
    )


def rotate_half(x: torch.Tensor, sign: float = 1.0) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2 * sign, x1 * sign), dim=-1)


def hf_rope(
    x: torch.Tensor, pos: torch.Tensor, base: float = 10000.0, bug: str | None = None
) -> torch.Tensor:
    """HF LLaMA: rotate_half with cos/sin = cat(freqs, freqs) (bugs: sign, layout, inv_freq)."""
    dim = x.shape[-1]
    if bug == "rope_inv_freq":
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 1, dtype=torch.float64)[: dim // 2] / dim))
    else:
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = torch.outer(pos.to(torch.float64), inv_freq)
    emb = freqs.repeat_interleave(2, dim=-1) if bug == "rope_layout" else torch.cat((freqs, freqs), dim=-1)
    return x * emb.cos() + rotate_half(x, -1.0 if bug == "rope_sign" else 1.0) * emb.sin()


def meta_rope(
    x: torch.Tensor, pos: torch.Tensor, base: float = 10000.0, rotary_dim: int | None = None
) -> torch.Tensor:
    """Meta LLaMA / GPT-J: interleaved pairs as complex numbers, first rotary_dim dims only."""
    r = rotary_dim or x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, r, 2, dtype=torch.float64)[: r // 2] / r))
    angles = torch.outer(pos.to(torch.float64), inv_freq)
    rot = torch.view_as_complex(x[..., :r].reshape(*x.shape[:-1], r // 2, 2).contiguous())
    rotated = torch.view_as_real(rot * torch.polar(torch.ones_like(angles), angles)).flatten(-2)
    return torch.cat((rotated, x[..., r:]), dim=-1)


def gptj_rope(
    x: torch.Tensor, pos: torch.Tensor, base: float = 10000.0, bug: str | None = None
) -> torch.Tensor:
    """GPT-J: rotate_every_two with sin/cos repeated per pair (bug rope_layout: cat(freqs, freqs))."""
    dim = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = torch.einsum("i,j->ij", pos.to(torch.float64), inv_freq)
    emb = (
        torch.cat((freqs, freqs), dim=-1)
        if bug == "rope_layout"
        else torch.repeat_interleave(freqs, 2, dim=-1)
    )
    every_two = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
    return x * emb.cos() + every_two * emb.sin()


def student(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    proj: Projections,
    heads: int,
    kv_heads: int | None = None,
    keep: torch.Tensor | None = None,
    causal: str = "none",
    bugs: tuple[str, ...] = (),
    rope: str | None = None,
) -> torch.Tensor:
    """Multi-head attention; ``bugs`` switches on mistakes, ``rope`` names a rotary variant."""
    b, sq, _ = query.shape
    sk = key.shape[1]
    kv_heads = kv_heads or heads

    def lin(p: Linear, x: torch.Tensor) -> torch.Tensor:
        return functional.linear(x, p.weight, p.bias)

    q = query if {"no_proj", "no_q_proj"} & set(bugs) else lin(proj.q, query)
    k = key if "no_proj" in bugs else lin(proj.k, key)
    v = value if {"no_proj", "no_v_proj"} & set(bugs) else lin(proj.v, value)
    d = q.shape[-1]
    dh = d // heads
    if "split_view" in bugs:
        q, k, v = q.view(b, heads, sq, dh), k.view(b, kv_heads, sk, dh), v.view(b, kv_heads, sk, dh)
    else:
        q = q.view(b, sq, heads, dh).transpose(1, 2)
        k = k.view(b, sk, kv_heads, dh).transpose(1, 2)
        v = v.view(b, sk, kv_heads, dh).transpose(1, 2)
    if rope is not None:
        q_pos, k_pos = torch.arange(sk - sq, sk), torch.arange(sk)
        if rope == "meta":
            q, k = meta_rope(q, q_pos), meta_rope(k, k_pos)
        elif rope.startswith("gptj"):
            bug = "rope_layout" if rope == "gptj_rope_layout" else None
            q, k = gptj_rope(q, q_pos, bug=bug), gptj_rope(k, k_pos, bug=bug)
        else:
            bug = rope if rope != "hf" else None
            q, k = hf_rope(q, q_pos, bug=bug), hf_rope(k, k_pos, bug=bug)
            if rope == "rope_on_value":
                v = hf_rope(v, k_pos)
    group = heads // kv_heads
    if group > 1:
        if "gqa_tiled" in bugs:
            k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
        else:  # HF repeat_kv
            k = k[:, :, None].expand(b, kv_heads, group, sk, dh).reshape(b, heads, sk, dh)
            v = v[:, :, None].expand(b, kv_heads, group, sk, dh).reshape(b, heads, sk, dh)
    if "scaled_twice" in bugs:
        q = q / math.sqrt(dh)
    scores = torch.matmul(q, k.transpose(-2, -1))
    if "scale_d_model" in bugs:
        scores = scores / math.sqrt(d)
    elif "scale_seq_len" in bugs:
        scores = scores / math.sqrt(sq)
    elif "scale_multiplied" in bugs:
        scores = scores * math.sqrt(dh)
    elif not {"no_scale", "scale_after_softmax"} & set(bugs):
        scores = scores / math.sqrt(dh)
    mask = None if keep is None else keep.to(torch.bool)
    if causal != "none":
        offset = sk - sq if causal == "bottom-right" else 0
        diagonal = (
            offset - 1
            if "causal_hides_self" in bugs
            else offset + 1
            if "causal_sees_next" in bugs
            else offset
        )
        tri = torch.ones(sq, sk, dtype=torch.bool).tril(diagonal=diagonal)
        mask = tri if mask is None else mask & tri
    if mask is not None and "mask_after_softmax" not in bugs:
        if "mask_multiplied" in bugs:
            scores = scores * mask.to(scores.dtype)
        elif "mask_added" in bugs:
            scores = scores + mask.to(scores.dtype)
        elif "mask_inverted" in bugs:
            scores = scores.masked_fill(mask, float("-inf"))
        else:
            scores = scores.masked_fill(mask == 0, float("-inf"))
    dim = -2 if "softmax_dim_queries" in bugs else 1 if "softmax_dim_heads" in bugs else -1
    attn = functional.softmax(scores, dim=dim)
    if "scale_after_softmax" in bugs:
        attn = attn / math.sqrt(dh)
    if mask is not None and "mask_after_softmax" in bugs:
        attn = attn * mask
    out = torch.matmul(attn, v)
    out = out.reshape(b, sq, d) if "merge_view" in bugs else out.transpose(1, 2).contiguous().view(b, sq, d)
    return out if "no_out_proj" in bugs else lin(proj.o, out)
