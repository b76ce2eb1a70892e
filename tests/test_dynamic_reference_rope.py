"""RoPE references and the basis-vector fingerprint, against independent HF and Meta code."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attncheck.dynamic.reference.rope import (
    RopeSpec,
    apply_rope,
    basis_inputs,
    fingerprint,
    relative_shift_error,
    value_rotation_code,
)
from tests.students import gptj_rope, hf_rope, meta_rope


def _images(rotate, head_dim: int = 16, positions: int = 6) -> torch.Tensor:
    """What the runner hands over: the user's rotation applied to the basis probe."""
    x, pos = basis_inputs(head_dim, positions)
    return rotate(x, pos)


@pytest.mark.parametrize("style", ["half", "interleaved"])
@given(
    head_dim=st.sampled_from([4, 8, 16]),
    partial=st.booleans(),
    base=st.sampled_from([100.0, 10000.0, 500000.0]),
    offset=st.integers(0, 50),
)
@settings(max_examples=15, deadline=None)
def test_reference_matches_independent_code(style, head_dim, partial, base, offset):
    rotary = head_dim // 2 if partial and head_dim >= 8 else None
    spec = RopeSpec(style, rotary, base)
    x = torch.randn(2, 3, 5, head_dim, dtype=torch.float64)
    pos = torch.arange(offset, offset + 5)
    if style == "half":
        r = spec.width(head_dim)
        independent = torch.cat([hf_rope(x[..., :r], pos, base), x[..., r:]], dim=-1)
    else:
        independent = meta_rope(x, pos, base, rotary)
    assert torch.allclose(apply_rope(x, pos, spec), independent, atol=1e-12)


def test_position_ids_per_batch_row():
    x = torch.randn(2, 2, 4, 8, dtype=torch.float64)
    ids = torch.tensor([[0, 1, 2, 3], [5, 6, 7, 8]])
    out = apply_rope(x, ids, RopeSpec("half"))
    assert torch.allclose(out[1], apply_rope(x[1:], torch.arange(5, 9), RopeSpec("half"))[0])
    assert torch.allclose(out[0], apply_rope(x[:1], torch.arange(4), RopeSpec("half"))[0])


@pytest.mark.parametrize("style", ["half", "interleaved"])
def test_shifting_positions_keeps_scores(style):
    q, k = torch.randn(1, 2, 5, 8, dtype=torch.float64), torch.randn(1, 2, 5, 8, dtype=torch.float64)
    spec = RopeSpec(style)
    pos = torch.arange(5)

    def scores(shift: int) -> torch.Tensor:
        return apply_rope(q, pos + shift, spec) @ apply_rope(k, pos + shift, spec).transpose(-1, -2)

    assert torch.allclose(scores(0), scores(17), atol=1e-10)
    assert relative_shift_error(_images(lambda x, p: apply_rope(x, p, spec))[0].transpose(0, 1)) < 1e-12


def test_fingerprint_names_hf_half_split():
    found = fingerprint(_images(lambda x, p: hf_rope(x, p)), expected=RopeSpec("half"))
    assert found.convention == "half" and found.code is None
    assert found.partners[:3] == (8, 9, 10) and found.rotary_dim == 16 and found.sign == 1
    assert found.base == pytest.approx(10000.0, rel=1e-6)


def test_fingerprint_names_meta_interleaved_partial():
    found = fingerprint(_images(lambda x, p: meta_rope(x, p, 500000.0, rotary_dim=8)))
    assert found.convention == "interleaved" and found.code is None
    assert (
        found.rotary_dim == 8
        and found.partners[:4] == (1, 0, 3, 2)
        and found.partners[8:] == tuple(range(8, 16))
    )
    assert found.base == pytest.approx(500000.0, rel=1e-6)
    assert found.frequencies[0] == pytest.approx(1.0)


def test_fingerprint_detects_sign_flip():
    found = fingerprint(_images(lambda x, p: hf_rope(x, p, bug="rope_sign")))
    assert found.code == "ATT402" and found.sign == -1 and "wrong way" in found.message


def test_fingerprint_detects_wrong_inv_freq():
    found = fingerprint(_images(lambda x, p: hf_rope(x, p, bug="rope_inv_freq")), expected=RopeSpec("half"))
    assert found.code == "ATT402" and found.base == pytest.approx(100.0, rel=1e-6)
    assert "instead of 10000" in found.message


def test_fingerprint_detects_mixed_cos_sin_layout():
    found = fingerprint(_images(lambda x, p: hf_rope(x, p, bug="rope_layout")))
    assert found.code == "ATT402" and found.convention == "half" and "other convention" in found.message
    assert (
        relative_shift_error(_images(lambda x, p: hf_rope(x, p, bug="rope_layout"))[0].transpose(0, 1)) > 0.1
    )


def test_fingerprint_names_gptj_and_its_layout_mistake():
    assert fingerprint(_images(lambda x, p: gptj_rope(x, p))).convention == "interleaved"
    found = fingerprint(_images(lambda x, p: gptj_rope(x, p, bug="rope_layout")))
    assert (
        found.code == "ATT402" and found.convention == "interleaved" and "repeat_interleave" in found.message
    )


def test_fingerprint_rejects_unknown_pairing():
    def odd_pairs(x, p):  # rotates dims 0 and 2 together: neither convention
        x = x.clone()
        angle = p.to(torch.float64)[:, None]
        a, b = x[..., 0].clone(), x[..., 2].clone()
        x[..., 0] = a * angle.cos().T - b * angle.sin().T
        x[..., 2] = b * angle.cos().T + a * angle.sin().T
        return x

    found = fingerprint(_images(odd_pairs, head_dim=4))
    assert found.convention == "unknown" and found.code == "ATT402"


def test_fingerprint_checks_the_expected_width():
    found = fingerprint(_images(lambda x, p: meta_rope(x, p, rotary_dim=8)), expected=RopeSpec("interleaved"))
    assert found.code == "ATT402" and "8 dims rotate instead of 16" in found.message


def test_fingerprint_needs_enough_positions():
    with pytest.raises(ValueError, match="P >= 2"):
        fingerprint(torch.zeros(2, 4, 4))


def test_value_rotation_is_att404():
    out = torch.randn(2, 3, 8)
    assert value_rotation_code(out, out + 1e-3, tol=1e-6) == "ATT404"
    assert value_rotation_code(out, out.clone(), tol=1e-6) is None
