"""Differential attention: the reference, rebuilt from the λ parameters, λ_init and head norm the child
sends, equals the Differential Transformer's own computation."""

from __future__ import annotations

import math

import torch

from attncheck.dynamic.reference import differential, mha

HEADS, WIDTH = 2, 16
DH = WIDTH // HEADS // 2


def _declared(lambda_init: float) -> tuple[dict, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    tensors = {f"declared/{name}": torch.randn(DH, dtype=torch.float64) * 0.1 for name in differential.LAMBDAS[:4]}
    tensors["declared/post/subln/weight"] = torch.rand(2 * DH, dtype=torch.float64) + 0.5
    declared = {"scalars": {"lambda_init": lambda_init},
                "post_norms": {"subln": {"kind": "rms", "eps": 1e-5, "bias": False, "offset": 0.0}}}
    return declared, tensors


def _paper(x: torch.Tensor, proj: mha.Projections, tensors: dict[str, torch.Tensor], lambda_init: float):
    """``MultiheadDiffAttn.forward`` of the paper's code (no mask, no cache)."""
    b, n, _ = x.shape
    q = proj.q(x).view(b, n, 2 * HEADS, DH).transpose(1, 2)
    k = proj.k(x).view(b, n, 2 * HEADS, DH).transpose(1, 2)
    v = proj.v(x).view(b, n, HEADS, 2 * DH).transpose(1, 2)
    weights = torch.softmax((q * DH**-0.5) @ k.transpose(-1, -2), dim=-1).view(b, HEADS, 2, n, n)
    lq1, lk1, lq2, lk2 = (tensors[f"declared/{name}"] for name in differential.LAMBDAS[:4])
    lam = torch.exp((lq1 * lk1).sum()) - torch.exp((lq2 * lk2).sum()) + lambda_init
    attn = (weights[:, :, 0] - lam * weights[:, :, 1]) @ v
    attn = attn * torch.rsqrt(attn.pow(2).mean(-1, keepdim=True) + 1e-5) * tensors["declared/post/subln/weight"]
    return proj.o((attn * (1 - lambda_init)).transpose(1, 2).reshape(b, n, WIDTH))


def test_the_form_equals_the_papers_code():
    lambda_init = 0.8 - 0.6 * math.exp(-0.3)
    declared, tensors = _declared(lambda_init)
    (form,) = differential.forms(declared, tensors, WIDTH)
    assert form.heads == HEADS
    proj = mha.Projections(*(mha.Linear(torch.randn(WIDTH, WIDTH, dtype=torch.float64)) for _ in range(4)))
    x = torch.randn(2, 5, WIDTH, dtype=torch.float64)
    torch.testing.assert_close(form(x, x, x, proj), _paper(x, proj, tensors, lambda_init))
    for mistake in form.mistakes(WIDTH):
        assert mistake.code == "ATT201"
        assert not torch.allclose(mistake.form(x, x, x, proj), form(x, x, x, proj))


def test_no_form_without_lambda_init_lambdas_or_a_head_norm():
    declared, tensors = _declared(0.2)
    assert differential.forms({**declared, "scalars": {}}, tensors, WIDTH) == []
    assert differential.forms(declared, {k: v for k, v in tensors.items() if "lambda" not in k}, WIDTH) == []
    assert differential.forms({**declared, "post_norms": {}}, tensors, WIDTH) == []
