"""A residual block's own norm of its input, read from the facts the child sends, as a VAE applies it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attncheck.dynamic.inside import variant_facts
from attncheck.dynamic.reference import pre_norm


class Block(nn.Module):
    """The layers of a VAE / U-Net attention block the child describes."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm
        self.q = nn.Conv2d(16, 16, 1)
        with torch.no_grad():  # a trained affine, not the identity it starts as
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)


@pytest.mark.parametrize("norm", [nn.GroupNorm(4, 16, eps=1e-6), nn.LayerNorm(16, eps=1e-5)])
def test_the_hook_is_the_modules_own_norm_of_the_sequence_laid_out_as_a_map(norm):
    torch.manual_seed(0)
    out: dict[str, torch.Tensor] = {}
    declared = variant_facts.declarations(Block(norm), out)
    hook = pre_norm.hook("norm", declared, out, 16)
    assert hook is not None
    sequence = torch.randn(2, 7, 16, dtype=torch.float64)  # (batch, positions, channels)
    norm = norm.to(torch.float64)
    if isinstance(norm, nn.GroupNorm):  # statistics over each group of channels and every position
        expected = norm(sequence.transpose(1, 2).unsqueeze(2)).flatten(2).transpose(1, 2)
    else:
        expected = norm(sequence)
    torch.testing.assert_close(hook(sequence), expected.detach())


def test_a_norm_of_another_width_or_name_is_not_the_blocks():
    out: dict[str, torch.Tensor] = {}
    declared = variant_facts.declarations(Block(nn.GroupNorm(4, 16)), out)
    assert pre_norm.hook("norm", declared, out, 32) is None
    assert pre_norm.hook("norm_out", declared, out, 16) is None
    assert pre_norm.hook("norm", {}, out, 16) is None


def test_the_residual_adds_the_input_to_every_stacked_output():
    query, out = torch.randn(2, 5, 8), torch.randn(3, 2, 5, 8)  # the diagnosis finishes many mutants at once
    torch.testing.assert_close(pre_norm.residual(out, query)[1], out[1] + query)
