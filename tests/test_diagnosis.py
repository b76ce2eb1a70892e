"""Diagnosis names the mistake of independent buggy implementations (tests/students.py)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from attncheck.dynamic.diagnosis.diagnose import Diagnosis, diagnose
from attncheck.dynamic.reference.mha import mha
from attncheck.dynamic.reference.mutants import MUTANTS, REFERENCE, Case, Knobs, Setting, mutated_mha
from attncheck.dynamic.reference.rope import RopeSpec, rope_hook
from tests.students import BUGS, random_projections, student

TOL = 1e-8


def _keep(gen: torch.Generator, b: int, q: int, k: int, per_query: bool) -> torch.Tensor:
    """A random keep-mask with at least one visible key per row."""
    keep = torch.rand(b, 1, q if per_query else 1, k, generator=gen) > 0.4
    first = torch.randint(0, k, (b, 1, keep.shape[2], 1), generator=gen)
    return keep.scatter(-1, first, True)


def _setup(seed: int, b: int, s: int, heads: int, kv_heads: int, dh: int, rope: RopeSpec | None = None):
    gen = torch.Generator().manual_seed(seed)
    d = heads * dh
    setting = Setting(random_projections(d, d, kv_heads * dh, gen), heads, kv_heads, rope)
    x = torch.randn(b, s, d, generator=gen, dtype=torch.float64)
    y = torch.randn(b, s + 2, d, generator=gen, dtype=torch.float64)
    cases = [
        Case(x, x, x),
        Case(x, x, x, keep=_keep(gen, b, s, s, per_query=bool(seed % 2))),
        Case(x, x, x, causal="top-left"),
        Case(x, y, y),
    ]
    return setting, cases


def _observe(setting: Setting, cases: list[Case], bugs: tuple[str, ...], rope: str | None = None):
    return [
        (
            c,
            student(
                c.query,
                c.key,
                c.value,
                setting.proj,
                setting.num_heads,
                setting.num_kv_heads,
                c.keep,
                c.causal,
                bugs,
                rope,
            ),
        )
        for c in cases
    ]


def _codes(diagnosis: Diagnosis) -> set[str]:
    explanations = (diagnosis.mutants, *diagnosis.alternatives)
    return {m.code for explanation in explanations for m in explanation}


def _differs_from_correct(setting: Setting, observations) -> bool:
    correct = _observe(setting, [c for c, _ in observations], ())
    return any(
        float((out - ok).abs().nan_to_num(0.0).max()) > TOL or not torch.equal(out.isnan(), ok.isnan())
        for (_, out), (_, ok) in zip(observations, correct, strict=True)
    )


def test_default_knobs_reproduce_the_reference():
    setting, cases = _setup(0, 2, 5, 4, 2, 8, RopeSpec("half"))
    for case in cases:
        q_pos, k_pos = case.positions()
        ref = mha(
            case.query,
            case.key,
            case.value,
            setting.proj,
            4,
            num_kv_heads=2,
            keep=case.keep,
            causal=case.causal,
            rope=rope_hook(setting.rope, q_pos, k_pos),
        )
        assert torch.allclose(mutated_mha(case, setting, REFERENCE), ref, atol=1e-12)


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_each_bug_is_named(bug):
    setting, cases = _setup(1, 2, 6, 4, 2 if bug == "gqa_tiled" else 4, 8)
    diagnosis = diagnose(_observe(setting, cases, (bug,)), setting, TOL)
    assert diagnosis.mutants, diagnosis.message
    # one mistake; an inverted mask that also inverts the causal part reads as two ATT304 knobs
    assert {m.code for m in diagnosis.mutants} == {BUGS[bug]}, diagnosis.message
    assert diagnosis.max_error <= TOL
    assert BUGS[bug] in diagnosis.message


@pytest.mark.parametrize(
    "rope, code",
    [
        ("rope_sign", "ATT402"),
        ("rope_layout", "ATT402"),
        ("rope_inv_freq", "ATT402"),
        ("rope_on_value", "ATT404"),
    ],
)
def test_rope_bugs_are_named(rope, code):
    setting, cases = _setup(2, 2, 6, 2, 2, 8, RopeSpec("half"))
    diagnosis = diagnose(_observe(setting, cases, (), rope), setting, TOL)
    assert [m.code for m in diagnosis.mutants] == [code], diagnosis.message


def test_interleaved_pairs_with_half_split_cos_sin_are_named():
    setting, cases = _setup(2, 2, 6, 2, 2, 8, RopeSpec("interleaved"))
    diagnosis = diagnose(_observe(setting, cases, (), "gptj_rope_layout"), setting, TOL)
    assert [m.name for m in diagnosis.mutants] == ["rope-cos-sin-layout"], diagnosis.message
    assert "pairs the dims interleaved" in diagnosis.message


@pytest.mark.parametrize("style, rope", [("half", "hf"), ("interleaved", "meta"), ("interleaved", "gptj")])
def test_both_rope_conventions_are_correct(style, rope):
    setting, cases = _setup(3, 2, 6, 2, 1, 8, RopeSpec(style))
    diagnosis = diagnose(_observe(setting, cases, (), rope), setting, TOL)
    assert diagnosis.matches_reference and diagnosis.mutants == ()


def test_causal_alignment_is_named_with_a_kv_cache():
    setting, _ = _setup(4, 2, 6, 2, 2, 8)
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(2, 3, 16, generator=gen, dtype=torch.float64)
    kv = torch.randn(2, 7, 16, generator=gen, dtype=torch.float64)
    cases = [Case(q, kv, kv, causal="bottom-right"), Case(kv, kv, kv, causal="bottom-right")]
    observed = [(c, student(c.query, c.key, c.value, setting.proj, 2, causal="top-left")) for c in cases]
    diagnosis = diagnose(observed, setting, TOL)
    assert [m.name for m in diagnosis.mutants] == ["causal-alignment"], diagnosis.message
    assert "top-left instead of bottom-right" in diagnosis.message


@pytest.mark.parametrize(
    "bugs",
    [
        ("scale_d_model", "no_out_proj"),
        ("mask_multiplied", "no_scale"),
        ("split_view", "softmax_dim_queries"),
    ],
)
def test_two_mistakes_are_named_as_a_pair(bugs):
    setting, cases = _setup(5, 2, 7, 4, 4, 8)
    diagnosis = diagnose(_observe(setting, cases, bugs), setting, TOL)
    assert len(diagnosis.mutants) == 2, diagnosis.message
    assert {m.code for m in diagnosis.mutants} == {BUGS[b] for b in bugs}
    assert "two mistakes" in diagnosis.message


def test_unexplained_difference_names_nothing():
    setting, cases = _setup(6, 2, 5, 2, 2, 8)
    observed = [(c, out + 1e-3 * torch.sin(out * 7)) for c, out in _observe(setting, cases, ())]
    diagnosis = diagnose(observed, setting, TOL)
    assert diagnosis.mutants == () and not diagnosis.matches_reference
    assert diagnosis.reference_error > TOL
    assert "no known mistake" in diagnosis.message


def test_nan_where_a_key_is_visible_is_not_explained():
    setting, cases = _setup(7, 2, 5, 2, 2, 8)
    observed = _observe(setting, cases, ("scale_d_model",))
    observed[0][1][0, 0, 0] = math.nan
    assert diagnose(observed, setting, TOL).mutants == ()


def test_messages_are_learner_level():
    setting, cases = _setup(8, 2, 9, 4, 4, 16)
    diagnosis = diagnose(_observe(setting, cases, ("scale_seq_len",)), setting, TOL)
    assert "divides the scores by sqrt(seq_len) = 3 instead of sqrt(head_dim) = 4" in diagnosis.message
    assert "Fix:" in diagnosis.message


def test_every_mutant_has_an_explanation_and_a_catalogue_code():
    from attncheck.catalogue import CODES

    for mutant in MUTANTS:
        assert mutant.code in CODES and mutant.what and mutant.why and mutant.fix
        assert mutant.knobs != REFERENCE and len(mutant.knobs.turned()) == 1


def test_knobs_combine_only_disjoint_mistakes():
    both = Knobs(scale="one").combine(Knobs(output="raw"))
    assert both.turned() == {"scale", "output"}


def test_wrong_output_shape_is_said_plainly():
    setting, cases = _setup(9, 1, 3, 1, 1, 4)
    observed = [(c, out[..., :2]) for c, out in _observe(setting, cases, ())]
    diagnosis = diagnose(observed, setting, TOL)
    assert diagnosis.mutants == () and "output shape (1, 3, 2) differs from (1, 3, 4)" in diagnosis.message


def test_no_observation_is_a_clear_error():
    setting, _ = _setup(9, 1, 3, 1, 1, 4)
    with pytest.raises(ValueError, match="at least one observation"):
        diagnose([], setting, TOL)


shapes = st.tuples(
    st.integers(1, 3),  # batch
    st.integers(2, 9),  # sequence
    st.sampled_from([(1, 1), (2, 1), (2, 2), (3, 1), (3, 3), (4, 1), (4, 2), (4, 4)]),  # heads, kv heads
    st.sampled_from([4, 8]),  # head_dim
    st.integers(0, 2**16),  # seed
)


@settings(max_examples=15, deadline=None)
@given(shapes)
def test_correct_attention_never_gets_a_mutant(shape):
    b, s, (heads, kv_heads), dh, seed = shape
    setting, cases = _setup(seed, b, s, heads, kv_heads, dh)
    diagnosis = diagnose(_observe(setting, cases, ()), setting, TOL)
    assert diagnosis.matches_reference and diagnosis.mutants == (), diagnosis.message


@settings(max_examples=25, deadline=None)
@given(shapes, st.sampled_from(sorted(BUGS)))
def test_bugs_are_named_whenever_they_show(shape, bug):
    b, s, (heads, kv_heads), dh, seed = shape
    assume(kv_heads == heads or bug not in {"no_proj", "no_v_proj"})  # raw V cannot split into KV heads
    setting, cases = _setup(seed, b, s, heads, kv_heads, dh)
    observed = _observe(setting, cases, (bug,))
    diagnosis = diagnose(observed, setting, TOL)
    if not _differs_from_correct(setting, observed):
        assert diagnosis.matches_reference
    else:
        assert BUGS[bug] in _codes(diagnosis), diagnosis.message
