"""Channel attention (DaViT, XCiT): the reference equals the models' own code, read from their weights."""

from __future__ import annotations

import torch
from torch.nn import functional as F  # noqa: N812

from attncheck.dynamic.reference import channel, mha

HEADS, WIDTH, TOKENS = 4, 16, 6


def _projections() -> tuple[mha.Projections, torch.Tensor, mha.Linear]:
    torch.manual_seed(0)
    fused = torch.randn(3 * WIDTH, WIDTH, dtype=torch.float64)
    out = mha.Linear(torch.randn(WIDTH, WIDTH, dtype=torch.float64))
    q, k, v = (mha.Linear(w) for w in fused.chunk(3))
    return mha.Projections(q, k, v, out), fused, out


def _davit(x: torch.Tensor, fused: torch.Tensor, out: mha.Linear, scale: float) -> torch.Tensor:
    """timm's DaViT ``ChannelAttention.forward``, verbatim but for the weights."""
    b, n, c = x.shape
    qkv = (x @ fused.T).reshape(b, n, 3, HEADS, c // HEADS).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    k = k * scale
    attn = (k.transpose(-1, -2) @ v).softmax(dim=-1)
    y = (attn @ q.transpose(-1, -2)).transpose(-1, -2)
    return out(y.transpose(1, 2).reshape(b, n, c))


def _xca(x: torch.Tensor, fused: torch.Tensor, out: mha.Linear, temperature: torch.Tensor) -> torch.Tensor:
    """timm's XCiT ``XCA.forward`` (eager branch)."""
    b, n, c = x.shape
    qkv = (x @ fused.T).reshape(b, n, 3, HEADS, c // HEADS).permute(2, 0, 3, 4, 1)
    q, k, v = qkv.unbind(0)
    q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    attn = ((q @ k.transpose(-2, -1)) * temperature).softmax(dim=-1)
    return out((attn @ v).permute(0, 3, 1, 2).reshape(b, n, c))


def _matching(forms: list[channel.ChannelForm], proj: mha.Projections, x: torch.Tensor, want: torch.Tensor):
    return [form for form in forms if torch.allclose(form(x, x, x, proj), want, atol=1e-10)]


def test_davit_is_one_of_the_readings_its_declared_scale_admits():
    proj, fused, out = _projections()
    x = torch.randn(2, TOKENS, WIDTH, dtype=torch.float64)
    scale = (WIDTH // HEADS) ** -0.5
    forms = channel.forms({"scalars": {"scale": scale}}, {}, HEADS, WIDTH, TOKENS)
    found = _matching(forms, proj, x, _davit(x, fused, out, scale))
    assert found and found[0].order == (1, 2, 0)  # kᵀ v applied to q
    assert "kᵀv" in found[0].text and "applied to q" in found[0].text


def test_xcit_reads_the_modules_temperature():
    proj, fused, out = _projections()
    x = torch.randn(2, TOKENS, WIDTH, dtype=torch.float64)
    temperature = torch.linspace(0.5, 2.0, HEADS, dtype=torch.float64).reshape(HEADS, 1, 1)
    want = _xca(x, fused, out, temperature)
    with_it = channel.forms({}, {"declared/temperature": temperature}, HEADS, WIDTH, TOKENS)
    assert [form.order for form in _matching(with_it, proj, x, want)] == [(0, 1, 2)]
    assert not _matching(channel.forms({}, {}, HEADS, WIDTH, TOKENS), proj, x, want)  # not without it


def test_channel_heads_come_from_the_softmax_not_the_modules_names():
    assert channel.channel_heads([{"shape": [2, 4, 4, 4]}], WIDTH, TOKENS, TOKENS) == 4
    assert channel.channel_heads([{"shape": [2, 4, 6, 6]}], WIDTH, TOKENS, TOKENS) is None  # token attention
    assert channel.channel_heads([{"shape": [2, 2, 4, 4]}], WIDTH, TOKENS, TOKENS) is None  # 2 x 4 is not the width
    assert channel.channel_heads(None, WIDTH, TOKENS, TOKENS) is None


def test_mistakes_change_what_the_module_would_compute():
    proj, _, _ = _projections()
    x = torch.randn(2, TOKENS, WIDTH, dtype=torch.float64)
    form = channel.forms({}, {}, HEADS, WIDTH, TOKENS)[0]
    found = form.mistakes(WIDTH)
    assert {m.code for m in found} == {"ATT201", "ATT202"}
    for mistake in found:
        assert not torch.allclose(mistake.form(x, x, x, proj), form(x, x, x, proj))
    normalised = next(f for f in channel.forms({}, {}, HEADS, WIDTH, TOKENS) if f.normalised)
    assert [m.code for m in normalised.mistakes(WIDTH)] == ["ATT202"]  # its temperature has no scale
