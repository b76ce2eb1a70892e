"""Binding: constructor candidates and forward roles from signatures, and pyproject declarations."""

from __future__ import annotations

import pytest

from attncheck.dynamic.binding import source_facts
from attncheck.dynamic.binding.bind import bind
from attncheck.findings import Parameter, Target


def target(init: str, forward: str, *, is_class: bool = True, config_class: str | None = None) -> Target:
    def params(text: str) -> tuple[Parameter, ...]:
        out = []
        for item in filter(None, (p.strip() for p in text.split(","))):
            name, _, default = item.partition("=")
            name, _, annotation = name.partition(":")
            out.append(Parameter(name.strip(), default.strip() or None, annotation.strip() or None))
        return tuple(out)

    return Target(
        "m.py", "Attn", 3, ("mha",), is_class, params(init), params(forward), config_class=config_class
    )


@pytest.mark.parametrize(
    ("init", "expected"),
    [
        ("self, d_model, num_heads, dropout=0.1", {"d_model": 32, "num_heads": 4, "dropout": 0.0}),
        ("self, hidden_dim, head_num", {"hidden_dim": 32, "head_num": 4}),
        (
            "self, embed_dim, num_heads, attn_dropout=0.0, bias=True",
            {"embed_dim": 32, "num_heads": 4, "attn_dropout": 0.0},
        ),
        ("self, dim, heads=8", {"dim": 32, "heads": 4}),
        ("self, n_embd, n_head, block_size", {"n_embd": 32, "n_head": 4, "block_size": 16}),
        (
            "self, hidden_size, num_attention_heads, num_key_value_heads",
            {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2},
        ),
    ],
)
def test_constructor_styles_get_small_sizes(init, expected):
    binding = bind(target(init, "self, x, mask=None"))
    assert binding.ok
    assert dict(binding.candidates[0].kwargs) == expected


def test_config_object_is_built_in_the_child_from_the_named_class():
    binding = bind(target("self, config: GPTConfig", "self, x"))
    assert binding.candidates[0].config == {"param": "config", "class": "GPTConfig", "reads": []}
    assert binding.candidates[1].config == {"param": "config", "class": None, "reads": []}  # namespace fallback


@pytest.mark.parametrize(
    ("forward", "roles", "mask"),
    [
        ("self, x, mask=None", ("x",), "mask"),
        ("self, query, key, value, mask=None", ("query", "key", "value"), "mask"),
        ("self, q, k, v, attn_mask=None", ("query", "key", "value"), "attn_mask"),
        ("self, hidden_states, attention_mask=None, output_attentions=False", ("x",), "attention_mask"),
        ("self, x, context", ("query", "kv"), None),
    ],
)
def test_forward_roles(forward, roles, mask):
    plan = bind(target("self, d_model, num_heads", forward)).forward
    assert tuple(role for _, role in plan.roles) == roles
    assert plan.mask_name == mask


def test_function_drops_its_dropout_and_needs_three_tensors():
    binding = bind(target("", "q, k, v, mask=None, dropout_p=0.1", is_class=False))
    assert binding.ok and binding.style == "function"
    assert dict(binding.forward.extra) == {"dropout_p": 0.0}
    assert not bind(target("", "x", is_class=False)).ok


def test_unknown_constructor_argument_skips_with_a_declaration_hint():
    binding = bind(target("self, d_model, rotary", "self, x"))
    assert not binding.ok
    assert "rotary" in binding.reason
    assert "[tool.attncheck.targets.Attn] init = {d_model = ..., rotary = ...}" in binding.hint


def test_llama_style_forward_without_a_freqs_helper_is_skipped():
    # start_pos is built (0); freqs_cis only from the file's own helper (test_dynamic_binding_forms)
    binding = bind(target("self, dim, n_heads", "self, x, start_pos, freqs_cis, mask"))
    assert not binding.ok and "forward needs freqs_cis," in binding.reason


def test_declaration_overrides_inference():
    declaration = {
        "init": {"width": 64, "num_heads": 4, "dropout": 0.2},
        "forward": ["query", "key", "value", "mask"],
        "mask": "blocked",
        "causal": True,
    }
    binding = bind(target("self, width, num_heads, rotary", "self, a, b, c, m=None"), declaration)
    assert binding.ok
    assert dict(binding.candidates[0].kwargs) == {"width": 64, "num_heads": 4, "dropout": 0.0}
    assert binding.candidates[0].dropout_names == ("dropout",)
    assert binding.declared_mask == "blocked" and binding.declared_causal is True
    assert binding.forward.mask_name == "m"  # the role at the position of parameter m
    bad = bind(target("self, d_model", "self, x"), {"mask": "inverted"})
    assert not bad.ok and "inverted" in bad.reason


_ALTERNATIVE_FORWARDS = '''
class Attention(nn.Module):
    def __init__(self, flash):
        super().__init__()
        self.attend = self.attend_flash if flash else self.attend_eager

    def forward(self, x):
        return self.attend(x)

    def attend_flash(self, x):
        return F.scaled_dot_product_attention(x, x, x, is_causal={flash})

    def attend_eager(self, x):
        return x

    def forward_decoder(self, x):
        return F.scaled_dot_product_attention(x, x, x, is_causal=True)
'''


@pytest.mark.parametrize(("flash", "off"), [("False", True), ("True", False)])
def test_causality_spelled_only_in_a_method_forward_never_reaches_is_off(flash, off):
    # attend_flash is reached through the attribute __init__ stores; forward_decoder is never reached
    facts = source_facts.read(_ALTERNATIVE_FORWARDS.format(flash=flash), "Attention", 2)
    assert facts.causal_off is off


@pytest.mark.parametrize(
    ("line", "ranks"),
    [
        ("mask = mask.repeat(1, self.n_rep, 1, 1)", {"mask": 4}),
        ("mask = mask.expand(b, h, s, s)", {"mask": 4}),
        ("mask = mask.repeat(self.heads, 1, 1)", {"mask": 3}),
        ("mask = mask.repeat(*sizes)", {}),  # the count of sizes is not in the code
        ("mask = torch.ones(2, 7).repeat(1, 2, 1, 1)", {}),  # not a forward argument
    ],
)
def test_the_rank_a_forward_tiles_its_mask_to(line, ranks):
    source = f"def attend(x, mask, sizes):\n    {line}\n    return x\n"
    assert dict(source_facts.read(source, "attend", 1).tiled_ranks) == ranks
