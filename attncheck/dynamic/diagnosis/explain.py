"""Turn "the output differs from the reference" into the name of the mistake.

The judge (``probes.Judge``) already holds everything a diagnosis needs: the
inputs it planned, the masks it sent, the weights the child recorded and mapped
(``weights.Assignment``) and the outputs that came back. This module builds the
diagnosis library's :class:`~attncheck.dynamic.reference.mutants.Case` and
:class:`~attncheck.dynamic.reference.mutants.Setting` from them, runs
:func:`~attncheck.dynamic.diagnosis.diagnose`, and words the verdict for a
learner: what the code does, why that is wrong, the fix, and the numbers.

When two explanations fit equally (``masked_fill(~keep, +1e4)`` behaves exactly
like an inverted mask), the one a static finding on the same target points at
wins, so the report says the same thing both ways.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import torch

from attncheck.dynamic import codes
from attncheck.dynamic.diagnosis.diagnose import Diagnosis, diagnose
from attncheck.dynamic.probes.base import Fit, JudgeView
from attncheck.dynamic.reference import pre_norm
from attncheck.dynamic.reference.mha import Causal, Projections, RopeHook
from attncheck.dynamic.reference.mutants import MUTANTS, Case, Mutant, Setting
from attncheck.dynamic.reference.post_norm import PostHook
from attncheck.dynamic.reference.rope import RopeSpec, rope_hook

FUNCTION_KNOBS = frozenset({"inputs", "split", "merge", "output"})
"""Knobs a bare attention function on (b, h, s, dh) cannot turn: it has no projections or head split."""

FALLBACK = codes.REFERENCE_MISMATCH
DIAGNOSED_CODES = tuple(sorted({mutant.code for mutant in MUTANTS}))
"""Every code a diagnosis can name: what a probe that reports the diagnosis declares."""


@dataclass(frozen=True)
class Explanation:
    """A diagnosis worded for the report: the code, the message and the check detail; ``codes``
    are those of every mistake it names (two for a pair), ``code`` the first."""

    code: str
    message: str
    detail: str
    diagnosis: Diagnosis
    codes: tuple[str, ...] = ()


def _as_tokens(x: torch.Tensor) -> torch.Tensor:
    """(b, h, s, dh) -> (b, s, h * dh): a function's per-head inputs as the mutants' (b, s, d)."""
    b, h, s, dh = x.shape
    return x.transpose(1, 2).reshape(b, s, h * dh)


def observation(
    judge: JudgeView,
    name: str,
    causal: Causal,
    keep: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
) -> tuple[Case, torch.Tensor]:
    """One experiment as a diagnosis case and the output the module gave on it."""
    query, key, value = judge.role_inputs(name)
    output = judge.output(name)
    if judge.style == "function":
        query, key, value = _as_tokens(query), _as_tokens(key), _as_tokens(value)
        output = output.reshape(*output.shape[:2], -1)  # (b, q, h, dh) -> (b, q, d)
    residual = None
    if judge.pre_norm is not None:  # a VAE block: the mutants read the normalised input, the raw one is added back
        residual, (query, key, value) = query, (judge.pre_norm[1](t) for t in (query, key, value))
    case = Case(query, key, value, keep=keep, causal=causal, position_ids=position_ids, residual=residual)
    return case, output


def setting_for(
    projections: Projections | None,
    heads: int,
    kv_heads: int | None,
    rope: RopeSpec | None,
    fit: Fit | None = None,
    post: PostHook | None = None,
) -> Setting:
    """The diagnosis setting; ``projections`` None is a bare function (identity projections).
    ``fit`` (a ``probes.Fit``) adds the variant the module declares and its q/k norm; ``post`` the
    module's own norm(output + input)."""
    proj = projections if projections is not None else Projections(None, None, None, None)
    variant, qk_norm = (fit.variant, fit.qk_norm) if fit is not None else (None, None)
    kv = kv_heads if kv_heads and kv_heads != heads else None
    return Setting(proj, heads, kv, rope, variant, qk_norm, post)


def mutants_for(style: str) -> tuple[Mutant, ...]:
    """The mistakes a target of this style can make: a self-attention target (one input) cannot project
    its K and V from another input than its query, so that mistake is not one of its own (nor evidence
    that its check could not see one)."""
    if style == "self":
        return tuple(m for m in MUTANTS if m.knobs.inputs != "kv_from_query")
    if style != "function":
        return MUTANTS
    return tuple(m for m in MUTANTS if not m.knobs.turned() & FUNCTION_KNOBS)


def explain(
    observations: Sequence[tuple[Case, torch.Tensor]],
    settings: Sequence[Setting],
    tol: float,
    *,
    style: str,
    static_codes: Collection[str] = (),
) -> Explanation | None:
    """The first setting whose mutants explain the outputs, worded; None when nothing does.

    ``settings`` are tried in order (e.g. the two RoPE conventions); a setting in
    which the outputs match the unmutated reference explains nothing.
    """
    mutants = mutants_for(style)
    for setting in settings:
        found = diagnose(observations, setting, tol, mutants=mutants)
        if found.matches_reference or not found.mutants:
            continue
        chosen = prefer_static(found, static_codes)
        case = observations[0][0]
        sentences = [_sentence(m, case, setting) for m in chosen]
        message = sentences[0] if len(sentences) == 1 else "two mistakes: " + " ".join(
            f"({i}) {s}" for i, s in enumerate(sentences, 1)
        )
        message += f" (output differs from the reference by {found.reference_error:.3g}, tolerance {tol:g})"
        detail = f"behaves like: {' + '.join(m.name for m in chosen)} (within {found.max_error:.3g})"
        if setting.variant is not None and setting.variant is not settings[0].variant:  # not the fit described
            detail += f" in the reading {setting.variant.name}"
        return Explanation(chosen[0].code, message, detail, found, tuple(m.code for m in chosen))
    return None


def prefer_static(found: Diagnosis, static_codes: Collection[str]) -> tuple[Mutant, ...]:
    """The best explanation, unless an equally good one is what the static pass saw on this target."""
    if any(m.code in static_codes for m in found.mutants):
        return found.mutants
    for alternative in found.alternatives:
        if any(m.code in static_codes for m in alternative):
            return alternative
    return found.mutants


def _sentence(mutant: Mutant, case: Case, setting: Setting) -> str:
    """What the code does, why that is wrong, and the fix."""
    what, why, fix = mutant.story(case, setting)
    why = why[0].upper() + why[1:]
    return f"{mutant.code} {mutant.name}: behaves exactly like attention that {what}. {why} Fix: {fix}"


# ---------------------------------------------------------------- glue to the judge


def rope_candidates(head_dim: int) -> list[RopeSpec]:
    """The rotary embeddings a module may legitimately use: both conventions, full or partial width."""
    widths = [w for w in (head_dim, head_dim // 2, head_dim // 4) if w >= 2 and w % 2 == 0]
    return [
        RopeSpec(style, None if width == head_dim else width)
        for width in widths
        for style in ("half", "interleaved")
    ]


def intended_causal(judge: JudgeView) -> Causal:
    """The causal alignment the module is meant to have (the one its fit found, else top-left)."""
    if not judge.is_causal()[0]:
        return "none"
    fit = judge.fit
    return fit.causal if fit is not None and fit.causal != "none" else "top-left"


DECLARED_SETTINGS = 6
"""How many of the declared variant's readings (window conventions, pairings, ALiBi forms) the
diagnosis tries, closest first: a mistake inside a variant is named against the reading it breaks."""


def settings_for_judge(judge: JudgeView) -> list[Setting]:
    fit = judge.fit
    heads = judge.binding.dims.heads
    if judge.style == "function":
        projections, kv_heads = None, None
    else:
        assert fit is not None and fit.assignment is not None
        projections, kv_heads = fit.assignment.projections, fit.assignment.kv_heads
    readings = [fit, *(f for f in judge.declared_readings if f is not fit)][:DECLARED_SETTINGS]
    settings = []
    for reading in readings:
        if reading is not None and reading.rope is not None:
            specs: list[RopeSpec | None] = [reading.rope]
        elif "rope" in judge.binding.target.kinds:
            specs = list(rope_candidates(judge.binding.dims.d_model // heads))
        else:
            specs = [None]
        post = judge.post_norm[1] if judge.post_norm is not None else None
        post = pre_norm.residual if judge.pre_norm is not None else post
        settings += [setting_for(projections, heads, kv_heads, spec, reading, post) for spec in specs]
    return settings


def diagnose_judge(judge: JudgeView, names: Sequence[str], combo: str | None = None) -> Explanation | None:
    """Explain the judge's outputs on ``names`` (and on the mask experiment ``combo``)."""
    causal = intended_causal(judge)
    observations = [observation(judge, name, causal) for name in names if judge.ran(name)]
    if combo is not None and judge.ran(f"mask/{combo}"):
        observations.append(observation(judge, f"mask/{combo}", causal, planned_keep(judge, combo)))
    if not observations:
        return None
    return explain(
        observations, settings_for_judge(judge), judge.tol, style=judge.style, static_codes=judge.static_codes
    )


def planned_keep(judge: JudgeView, combo: str) -> torch.Tensor:
    """The keep mask (b, 1, q, k) or (b, 1, 1, k) the mask experiment ``combo`` ("shape/convention") expressed."""
    keep = torch.from_numpy(judge.plan.keep[f"mask/{combo.split('/')[0]}"])
    return keep.unsqueeze(1) if keep.ndim == 3 else keep  # (b, q, k) -> (b, 1, q, k)


def rope_for(spec: RopeSpec | None, query: torch.Tensor, key: torch.Tensor) -> RopeHook | None:
    """The reference's rotary hook for (b, s, d) inputs: queries are the last q of the k positions."""
    if spec is None:
        return None
    q_len, k_len = query.shape[1], key.shape[1]
    return rope_hook(spec, torch.arange(k_len - q_len, k_len), torch.arange(k_len))


def rope_text(spec: RopeSpec) -> str:
    """A rotary embedding as the report names it."""
    style = {"half": "half-split (rotate_half, HF LLaMA)", "interleaved": "interleaved pairs (Meta, GPT-J)"}
    width = f", first {spec.rotary_dim} dims of each head" if spec.rotary_dim is not None else ""
    source = spec.scheme if spec.frequencies is not None and spec.scheme else f"base {spec.base:g}"
    factor = f", cos/sin x {spec.attention_factor:.4g}" if spec.attention_factor != 1.0 else ""
    return f"{style[spec.style]}, {source}{width}{factor}"
