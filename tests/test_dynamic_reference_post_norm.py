"""The module's own norm(output + input), read from the facts the child sends, as TVP applies it."""

from __future__ import annotations

import torch

from attncheck.dynamic.reference import post_norm


def _facts(width: int) -> tuple[dict, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    weight, bias = torch.rand(width, dtype=torch.float64) + 0.5, torch.randn(width, dtype=torch.float64)
    declared = {"post_norms": {"layer_norm": {"kind": "layer", "eps": 1e-12, "bias": True, "offset": 0.0}}}
    return declared, {"declared/post/layer_norm/weight": weight, "declared/post/layer_norm/bias": bias}


def test_the_hook_is_the_modules_layer_norm_of_output_plus_input():
    declared, tensors = _facts(8)
    (name, hook), = post_norm.hooks(declared, tensors, 8)
    norm = torch.nn.LayerNorm(8, eps=1e-12, dtype=torch.float64)
    with torch.no_grad():
        norm.weight.copy_(tensors["declared/post/layer_norm/weight"])
        norm.bias.copy_(tensors["declared/post/layer_norm/bias"])
    out, query = torch.randn(2, 5, 8, dtype=torch.float64), torch.randn(2, 5, 8, dtype=torch.float64)
    assert name == "layer_norm"
    torch.testing.assert_close(hook(out, query), norm(out + query))
    stacked = torch.stack([out, 2 * out])  # the diagnosis finishes many mutants at once
    torch.testing.assert_close(hook(stacked, query)[1], norm(2 * out + query))


def test_a_norm_of_another_width_is_not_the_output_norm():
    declared, tensors = _facts(8)
    assert post_norm.hooks(declared, tensors, 16) == []
    assert post_norm.hooks({}, tensors, 8) == []


def test_the_child_describes_token_norms_only():
    from torch import nn

    from attncheck.dynamic.inside import variant_facts

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q_norm = nn.LayerNorm(4)  # a q/k norm, not the output's
            self.layer_norm = nn.LayerNorm(8)
            self.batch_norm = nn.BatchNorm1d(8)  # its statistics span tokens

    out: dict[str, torch.Tensor] = {}
    facts = variant_facts.declarations(Attention(), out)
    assert list(facts["post_norms"]) == ["layer_norm"]
    assert out["declared/post/layer_norm/weight"].shape == (8,)
