"""float16 and bfloat16: plan the low-precision runs, judge them with the flash-attn rule.

The child builds a second instance with the same seed (so the same weights),
rounds its parameters to the dtype and runs the plain inputs (and one masked
input per mask convention) in that dtype. The parent compares the result with
the float64 reference and with a naive attention computed in the same dtype
(``lowprec.judge``): a module passes when it loses no more than twice what the
naive attention loses, plus the rounding floor. ``masked_fill(-1e9)`` raises in
float16 ("value cannot be converted to type c10::Half without overflow"): ATT302
with the exception; an accuracy loss beyond the rule is ATT909.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from attncheck.dynamic import codes
from attncheck.dynamic.diagnosis import explain
from attncheck.dynamic.probes.base import FunctionProbe, JudgeView, Outcome, Planner, every_target
from attncheck.dynamic.reference import lowprec
from attncheck.dynamic.reference import mha as reference
from attncheck.dynamic.reference.mutants import Case
from attncheck.findings import Check

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
MASK_SHAPE = "b11k"



def plan(planner: Planner) -> None:
    """Low-precision experiments: the plain inputs, and each mask convention of one shape."""
    masks = masks_to_plan(planner.masks)
    for dtype in DTYPES:
        planner.add(f"plain@{dtype}", planner.plain, instance=dtype, dtype=dtype)
        for combo, mask in masks.items():
            planner.add(f"mask/{combo}@{dtype}", planner.plain, mask, instance=dtype, dtype=dtype)


def masks_to_plan(tensor_names: dict[str, str]) -> dict[str, str]:
    """The mask tensors of one shape in every convention: combo -> tensor name."""
    return {combo: name for combo, name in tensor_names.items() if combo.startswith(f"{MASK_SHAPE}/")}


def verdicts(judge: JudgeView) -> Iterator[Outcome]:
    """One check per dtype, when the float32 output matches the reference (else nothing to compare)."""
    masked = [
        c
        for c in (f"{MASK_SHAPE}/{convention}" for convention in ("keep", "blocked", "additive"))
        if judge.ran(f"mask/{c}") and judge.masked_error(c) <= judge.tol
    ]
    combo = masked[0] if masked else None
    for dtype_name, dtype in DTYPES.items():
        if f"plain@{dtype_name}" not in judge.experiments:
            continue
        if judge.fit is None or judge.fit.error > judge.tol:
            yield Check(f"low-precision-{dtype_name}", "skipped", "the float32 output does not match"), None, ""
            continue
        runs: list[tuple[str, str | None]] = [("plain", None)]
        if combo is not None:
            runs.append((f"mask/{combo}", combo))
        yield _judge_dtype(judge, dtype_name, dtype, runs)


def _judge_dtype(judge: JudgeView, dtype_name: str, dtype: torch.dtype, runs: list[tuple[str, str | None]]) -> Outcome:
    name = f"low-precision-{dtype_name}"
    details: list[str] = []
    for base, combo in runs:
        experiment = f"{base}@{dtype_name}"
        record = judge.facts["experiments"].get(experiment)
        if record is None:
            continue
        if not record.get("ok"):
            error = record["error"]
            text = f"{error['type']}: {error['message']}"
            overflow = lowprec.exception_verdict(text, dtype)
            if overflow is not None:
                return Check(name, "failed", text), overflow.code, overflow.message
            return (
                Check(name, "failed", f"{base} raised {text}"),
                codes.LOW_PRECISION,
                f"the forward pass fails in {dtype_name} ({base} input): {text.rstrip('.')}. Attention must run in the "
                "dtype of the model. Fix: keep every tensor and constant in the input's dtype.",
            )
        verdict = _compare(judge, base, combo, experiment, dtype)
        details.append(f"{base}: {verdict.message}")
        if not verdict.passed:
            return Check(name, "failed", "; ".join(details)), verdict.code, verdict.message
    if not details:
        return Check(name, "skipped", f"no {dtype_name} experiment ran"), None, ""
    return Check(name, "passed", "; ".join(details)), None, ""


def _keep(judge: JudgeView, combo: str | None) -> torch.Tensor | None:
    if combo is None:
        return None
    return torch.from_numpy(judge.plan.keep[f"mask/{combo.split('/')[0]}"])


def _compare(judge: JudgeView, base: str, combo: str | None, experiment: str, dtype: torch.dtype) -> lowprec.Verdict:
    keep = _keep(judge, combo)
    exact = judge.reference(base, keep, judge.fit)
    output = judge.output(experiment)
    naive = _naive(judge, base, keep, dtype)
    heads = judge.binding.dims.heads
    q_len, k_len = exact.shape[1], judge.role_inputs(base)[1].shape[-2]
    full = keep
    causal = reference.causal_keep(q_len, k_len, judge.fit.causal)
    if causal is not None:
        full = causal if full is None else full & causal
    rows = ~reference.fully_masked_rows(full, (exact.shape[0], heads, q_len, k_len))
    return lowprec.judge(output, exact, naive, dtype, rows)


def _naive(judge: JudgeView, base: str, keep: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """The reference computed in ``dtype`` (inputs and weights rounded), as float64."""
    query, key, value = judge.role_inputs(base)
    fit = judge.fit
    if judge.style == "function":
        full = reference.causal_keep(query.shape[2], key.shape[2], fit.causal)
        mask = full if keep is None else (keep if full is None else keep & full)
        out = reference.sdpa(query.to(dtype), key.to(dtype), value.to(dtype), mask)
        return out.to(torch.float64).transpose(1, 2)
    setting = explain.setting_for(fit.assignment.projections, judge.binding.dims.heads, fit.assignment.kv_heads, None)
    case = Case(query, key, value, keep=keep, causal=fit.causal)
    return lowprec.naive_reference(case, setting, dtype, explain.rope_for(fit.rope, query, key))


PROBE = FunctionProbe(
    "low-precision", ("ATT302", codes.LOW_PRECISION), 10, every_target, plan, lambda view: list(verdicts(view))
)
