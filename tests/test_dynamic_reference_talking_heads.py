"""Talking heads (CaiT): the reference, built from the recorded (h, h) layers, equals CaiT's own code."""

from __future__ import annotations

import torch

from attncheck.dynamic.binding.weights import Layer
from attncheck.dynamic.reference import mha, talking_heads

HEADS, WIDTH = 4, 16


def _linear(rows: int, cols: int) -> mha.Linear:
    return mha.Linear(torch.randn(rows, cols, dtype=torch.float64), torch.randn(rows, dtype=torch.float64))


def _cait(x: torch.Tensor, fused: mha.Linear, out: mha.Linear, proj_l: mha.Linear, proj_w: mha.Linear) -> torch.Tensor:
    """timm's CaiT ``TalkingHeadAttn.forward``, verbatim but for the weights."""
    b, n, c = x.shape
    qkv = fused(x).reshape(b, n, 3, HEADS, c // HEADS).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0] * (c // HEADS) ** -0.5, qkv[1], qkv[2]
    attn = q @ k.transpose(-2, -1)
    attn = proj_l(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
    attn = attn.softmax(dim=-1)
    attn = proj_w(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
    return out((attn @ v).transpose(1, 2).reshape(b, n, c))


def test_the_recorded_mixers_before_and_after_the_softmax_give_caits_output():
    torch.manual_seed(0)
    fused, out = _linear(3 * WIDTH, WIDTH), _linear(WIDTH, WIDTH)
    proj_l, proj_w = _linear(HEADS, HEADS), _linear(HEADS, HEADS)
    layers = [Layer("qkv", "x", fused), Layer("proj_l", "other", proj_l), Layer("proj_w", "other", proj_w),
              Layer("proj", "other", out)]
    (form,) = talking_heads.forms(layers, WIDTH)
    q, k, v = (mha.Linear(w, b) for w, b in zip(fused.weight.chunk(3), fused.bias.chunk(3), strict=True))
    x = torch.randn(2, 5, WIDTH, dtype=torch.float64)
    got = form(x, x, x, mha.Projections(q, k, v, out))
    torch.testing.assert_close(got, _cait(x, fused, out, proj_l, proj_w))
    assert form.text == "talking heads: proj_l before the softmax, proj_w after it"


def test_one_mixer_is_read_before_or_after_and_none_is_no_talking_heads():
    mixer = Layer("mix", "other", _linear(HEADS, HEADS))
    readings = talking_heads.forms([mixer], WIDTH)
    assert [(f.pre is not None, f.post is not None) for f in readings] == [(True, False), (False, True)]
    assert talking_heads.forms([Layer("proj", "other", _linear(WIDTH, WIDTH))], WIDTH) == []
    assert talking_heads.forms([Layer("mix", "x", _linear(HEADS, HEADS))], WIDTH) == []  # reads an input


def test_its_mistakes_each_change_the_output():
    torch.manual_seed(1)
    proj = mha.Projections(*(_linear(WIDTH, WIDTH) for _ in range(4)))
    (form,) = talking_heads.forms([Layer("l", "other", _linear(HEADS, HEADS)),
                                   Layer("w", "other", _linear(HEADS, HEADS))], WIDTH)
    x = torch.randn(2, 5, WIDTH, dtype=torch.float64)
    mistakes = form.mistakes(WIDTH)
    assert {m.code for m in mistakes} == {"ATT201", "ATT202"}
    for mistake in mistakes:
        assert not torch.allclose(mistake.form(x, x, x, proj), form(x, x, x, proj))
