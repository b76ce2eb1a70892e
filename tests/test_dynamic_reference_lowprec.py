"""The low-precision rule: flash-attn style tolerance against a naive same-dtype reference."""

from __future__ import annotations

import pytest
import torch

from attncheck.dynamic.reference.lowprec import exception_verdict, judge, naive_reference, rounding_floor, tolerance
from attncheck.dynamic.reference.mha import Linear, Projections, mha
from attncheck.dynamic.reference.mutants import Case, Setting
from attncheck.dynamic.reference.rope import RopeSpec, rope_hook
from tests.students import random_projections, student

D, HEADS = 64, 4


def _setup(seed: int):
    gen = torch.Generator().manual_seed(seed)
    proj = random_projections(D, D, D, gen)
    x = torch.randn(2, 9, D, generator=gen, dtype=torch.float64)
    keep = torch.ones(2, 1, 1, 9, dtype=torch.bool)
    keep[0, ..., 6:] = False
    return Setting(proj, HEADS), Case(x, x, x, keep=keep, causal="top-left")


def _cast(proj: Projections, dtype: torch.dtype) -> Projections:
    return Projections(
        *(Linear(p.weight.to(dtype), p.bias.to(dtype)) for p in (proj.q, proj.k, proj.v, proj.o))
    )


def _run_student(
    setting: Setting, case: Case, dtype: torch.dtype, bugs: tuple[str, ...] = ()
) -> torch.Tensor:
    q = case.query.to(dtype)
    return student(q, q, q, _cast(setting.proj, dtype), HEADS, keep=case.keep, causal=case.causal, bugs=bugs)


def _reference(setting: Setting, case: Case) -> torch.Tensor:
    return mha(case.query, case.key, case.value, setting.proj, HEADS, keep=case.keep, causal=case.causal)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_correct_low_precision_attention_passes(dtype, seed):
    setting, case = _setup(seed)
    verdict = judge(
        _run_student(setting, case, dtype),
        _reference(setting, case),
        naive_reference(case, setting, dtype),
        dtype,
    )
    assert verdict.passed and verdict.code is None, verdict.message


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_d_model_scale_is_caught_in_low_precision(dtype, seed):
    setting, case = _setup(seed)
    verdict = judge(
        _run_student(setting, case, dtype, ("scale_d_model",)),
        _reference(setting, case),
        naive_reference(case, setting, dtype),
        dtype,
    )
    assert not verdict.passed and verdict.code == "ATT909", verdict.message
    assert verdict.error > verdict.allowed
    assert "naive" in verdict.message


def test_float16_overflow_error_is_att302():
    scores = torch.zeros(2, 3, dtype=torch.float16)
    with pytest.raises(RuntimeError) as raised:
        scores.masked_fill(torch.ones(2, 3, dtype=torch.bool), -1e9)
    verdict = exception_verdict(str(raised.value), torch.float16)
    assert verdict is not None and verdict.code == "ATT302" and "finfo" in verdict.message


def test_other_exceptions_are_not_att302():
    assert exception_verdict("mat1 and mat2 shapes cannot be multiplied", torch.float16) is None


def test_inf_output_is_att302():
    setting, case = _setup(3)
    out = _run_student(setting, case, torch.float16).clone()
    out[0, 0, 0] = float("-inf")
    verdict = judge(
        out, _reference(setting, case), naive_reference(case, setting, torch.float16), torch.float16
    )
    assert verdict.code == "ATT302" and "inf" in verdict.message


def test_fully_masked_rows_are_excluded():
    setting, case = _setup(4)
    out = _run_student(setting, case, torch.bfloat16).clone()
    out[1, 2] = float("nan")
    rows = torch.ones(2, 9, dtype=torch.bool)
    rows[1, 2] = False
    verdict = judge(
        out, _reference(setting, case), naive_reference(case, setting, torch.bfloat16), torch.bfloat16, rows
    )
    assert verdict.passed, verdict.message


def test_rounding_floor_per_dtype():
    ref = torch.tensor([0.5, -4.0])
    assert rounding_floor(torch.float16, ref) == 4.0 * 2**-10
    assert rounding_floor(torch.bfloat16, ref) == 4.0 * 2**-7
    with pytest.raises(ValueError, match="no rounding unit"):
        rounding_floor(torch.int8, ref)


def test_float32_rule_has_a_floor_of_1e_5():
    ref = torch.zeros(3, dtype=torch.float64)
    assert tolerance(torch.float32, ref, ref + 1e-9) == 1e-5
    assert tolerance(torch.float32, ref, ref + 1e-4) == pytest.approx(2e-4)


def test_naive_reference_with_rope_is_close_to_float64():
    setting, case = _setup(5)
    spec = RopeSpec("half")
    q_pos, k_pos = case.positions()
    hook = rope_hook(spec, q_pos, k_pos)
    ref = mha(
        case.query, case.key, case.value, setting.proj, HEADS, keep=case.keep, causal=case.causal, rope=hook
    )
    naive = naive_reference(case, setting, torch.bfloat16, rope=hook)
    assert 0 < float((naive - ref).abs().max()) < 0.1
