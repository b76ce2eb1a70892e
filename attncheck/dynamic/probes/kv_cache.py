"""The KV-cache consistency probe: decoding with a cache must give what the full forward gives.

A module whose forward takes a cache (``past_key_value=None``...) has two code
paths, and a mistake can hide in the one no other probe calls (the catalogue's
hard cases: ``.repeat`` on the cache path and ``repeat_kv`` on the prompt path;
``is_causal=True`` with a cache). The child cuts a legacy ``(k, v)`` cache,
each (batch, n_kv_heads, prefix_len, head_dim), for the first ``PREFIX`` tokens
from the module's own K/V projections (``kv_cache``) and runs forward on the
remaining tokens with it. Here, in the parent, the cached rows are compared
with the same rows of the full forward, and a difference is named by the
mutated references (``mutants``) of the cache path: KV heads tiled, the causal
mask aligned top-left, the causal mask dropped.

Rotary targets are skipped (cached keys would have to be rotated to their
positions, which this probe does not do), and so is any module whose forward
rejects a tuple cache (an HF ``Cache`` object, say): the reason says why.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attncheck.dynamic import codes
from attncheck.dynamic.binding.bind import Binding, cache_param
from attncheck.dynamic.probes.base import Fit, FunctionProbe, JudgeView, Outcome, Planner, as_list
from attncheck.dynamic.reference.mha import split_heads
from attncheck.dynamic.reference.mutants import Case, Knobs, Setting, Stages
from attncheck.dynamic.reference.tolerance import max_error
from attncheck.findings import Check

NAME = "kv-cache"
EXPERIMENT = "cache"
PREFIX = 4  # tokens 0..PREFIX-1 go into the cache; the rest are decoded with it


def _param(binding: Binding) -> str | None:
    """The cache parameter, for a self-attention class (the only kind whose cache is the input's K/V)."""
    if not binding.target.is_class or binding.style != "self":
        return None
    return cache_param(binding.target)


def _rotary(binding: Binding) -> bool:
    return "rope" in binding.target.kinds


def wanted(binding: Binding) -> bool:
    """A forward that takes a cache, on a batch-first module without rotary positions (the cache is cut
    from projection outputs laid out (batch, seq, ...))."""
    sequence_first = binding.forward is not None and bool(binding.forward.sequence_first)
    return _param(binding) is not None and not _rotary(binding) and not sequence_first


def plan(planner: Planner) -> None:
    """One experiment: forward on tokens PREFIX.. of the plain input with a cache of tokens ..PREFIX-1."""
    binding, x, param = planner.binding, planner.base, _param(planner.binding)
    if x.shape[-2] <= PREFIX:
        return
    width, heads = binding.dims.width, binding.dims.heads
    prefix = planner.tensor("cache/prefix", np.ascontiguousarray(x[:, :PREFIX]))
    suffix = planner.tensor("cache/suffix", np.ascontiguousarray(x[:, PREFIX:]))
    spec = {"param": param, "prefix": prefix, "d_model": width, "head_dim": width // heads}
    planner.add(EXPERIMENT, {"x": suffix}, kv_cache=spec)


def _skip(reason: str) -> Outcome:
    return Check(NAME, "skipped", reason), None, ""


def verdict(judge: JudgeView) -> Outcome | None:
    """The kv-cache check, or None when the target takes no cache."""
    param = _param(judge.binding)
    if param is None:
        return None
    if _rotary(judge.binding) or (judge.fit is not None and judge.fit.rope is not None):
        return _skip("rotary attention: cached keys would have to be rotated to their positions")
    if EXPERIMENT not in judge.experiments:
        return _skip("the input is too short to split into a cached prefix and new tokens")
    if not judge.ran(EXPERIMENT):
        error = judge.facts["experiments"][EXPERIMENT]["error"]
        line = f" (line {error['line']})" if error.get("line") else ""
        return _skip(
            f"forward with {param}=(k, v), each (batch, kv_heads, {PREFIX}, head_dim), raised "
            f"{error['type']}: {error['message']}{line}; other cache formats are not probed"
        )
    fit = judge.fit
    if fit is None or fit.assignment is None or fit.error > judge.tol:
        return _skip("the full forward does not match the reference, so its K/V projections are not known")
    cache = _Cache.of(judge, fit)
    if not cache.cut_matches(judge.tol):
        return _skip("the cache cut from the module's projections is not the K/V the reference found")
    return cache.judge(judge.tol)


@dataclass(frozen=True)
class _Cache:
    """The cached run, the full run's rows for the same tokens, and what the reference knows."""

    cached: torch.Tensor  # (b, s - PREFIX, d) forward on the new tokens with the cache
    full: torch.Tensor  # (b, s - PREFIX, d) the same rows of the forward on every token
    case: Case  # the new tokens as queries over every token's keys and values
    setting: Setting
    cut: tuple[torch.Tensor, torch.Tensor]  # the (k, v) cache the child built

    @classmethod
    def of(cls, judge: JudgeView, fit: Fit) -> _Cache:
        x = judge.role_inputs("plain")[0]
        suffix = judge.role_inputs(EXPERIMENT)[0]
        causal = "none" if fit.causal == "none" else "bottom-right"  # new tokens see every cached key
        return cls(
            judge.output(EXPERIMENT),
            judge.output("plain")[:, PREFIX:],
            Case(suffix, x, x, causal=causal),
            Setting(fit.assignment.projections, judge.binding.dims.heads, fit.assignment.kv_heads),
            (judge.out[f"{EXPERIMENT}/cache_k"], judge.out[f"{EXPERIMENT}/cache_v"]),
        )

    def cut_matches(self, tol: float) -> bool:
        """The child's cache is the prefix through the K and V projections the reference found."""
        proj, kv_heads = self.setting.proj, self.setting.num_kv_heads or self.setting.num_heads
        prefix = self.case.key[:, :PREFIX]
        for layer, got in zip((proj.k, proj.v), self.cut, strict=True):
            expected = split_heads(prefix if layer is None else layer(prefix), kv_heads)
            if max_error(got, expected) > tol:
                return False
        return True

    def judge(self, tol: float) -> Outcome:
        error = max_error(self.cached, self.full)
        tokens = f"decoding tokens {PREFIX}..{self.case.key.shape[1] - 1} with a (k, v) cache of tokens 0..{PREFIX - 1}"
        detail = f"{tokens} differs from the full forward by {error:.3g} (tolerance {tol:g})"
        if error <= tol:
            return Check(NAME, "passed", f"{tokens} matches the full forward within {error:.3g}"), None, ""
        stages = Stages(self.case, self.setting)
        for mistake in self._mistakes():
            explained = max_error(self.cached, stages.output(mistake.knobs))
            if explained <= tol:
                message = mistake.message(self, error, explained)
                return Check(NAME, "failed", f"{detail}; {mistake.what}"), mistake.code, message
        return (
            Check(NAME, "failed", detail),
            codes.REFERENCE_MISMATCH,
            f"{tokens} differs from the same rows of the full forward by {error:.3g} (tolerance {tol:g}): "
            "the cache path computes attention differently from the prompt path, and neither tiled KV heads "
            "nor a misaligned or missing causal mask explains it",
        )

    def _mistakes(self) -> list[_Mistake]:
        heads, kv_heads = self.setting.num_heads, self.setting.num_kv_heads or self.setting.num_heads
        found = []
        if kv_heads != heads:
            found.append(_TILED)
        if self.case.causal != "none":
            found.extend((_TOP_LEFT, _NO_CAUSAL))
        return found


@dataclass(frozen=True)
class _Mistake:
    """A mistake of the cache path: the mutant knobs that reproduce it and how to explain it."""

    code: str
    what: str
    explanation: str  # template: {heads} {kv_heads} {group} {prefix} {new}
    knobs: Knobs

    def message(self, cache: _Cache, error: float, explained: float) -> str:
        heads = cache.setting.num_heads
        kv_heads = cache.setting.num_kv_heads or heads
        new = cache.case.query.shape[1]
        numbers = {"heads": heads, "kv_heads": kv_heads, "group": heads // kv_heads, "prefix": PREFIX, "new": new}
        return (
            f"{self.explanation.format(**numbers)} (with a cache of {PREFIX} tokens, the {new} new tokens differ "
            f"from the full forward by {error:.3g} and match this mistake within {explained:.3g})"
        )


_TILED = _Mistake(
    "ATT401",
    "the cached run equals the reference with KV heads tiled (.repeat)",
    "the KV-cache path tiles the {kv_heads} KV heads (.repeat: query head h reads KV head h % {kv_heads}) "
    "while the prompt path groups them (query head h reads KV head h // {group}, as repeat_kv does). The two "
    "paths pair query heads with different keys and values, so generating with a cache gives other outputs "
    "than the prompt, and pretrained GQA weights expect the grouping. Fix: expand K/V the same way on both "
    "paths: repeat_kv(k, {group}) or k.repeat_interleave({group}, dim=1), never k.repeat(1, {group}, 1, 1)",
    Knobs(kv_map="tiled"),
)
_TOP_LEFT = _Mistake(
    "ATT305",
    "the cached run equals the reference with the causal mask aligned top-left",
    "with a KV cache the causal mask is aligned top-left (is_causal=True, or tril(ones(q_len, k_len))): new "
    "token i sees only keys 0..i instead of the {prefix} cached keys and itself. With a cache the queries are "
    "the last q_len of the k_len positions. Fix: align it bottom-right: tril(ones(q_len, k_len), "
    "diagonal=k_len - q_len), and pass is_causal=True only when q_len == k_len",
    Knobs(causal="other_alignment"),
)
_NO_CAUSAL = _Mistake(
    codes.FUTURE_LEAK,
    "the cached run equals the reference with no causal mask",
    "with a KV cache the causal mask is not applied: each of the {new} new tokens decoded together sees the "
    "later ones, which the prompt path hides. Fix: apply the causal mask on the cache path too, aligned "
    "bottom-right (query i sees keys 0..{prefix} + i)",
    Knobs(causal="missing"),
)


PROBE = FunctionProbe(
    NAME,
    ("ATT305", "ATT401", codes.REFERENCE_MISMATCH, codes.FUTURE_LEAK),
    30,
    wanted,
    plan,
    lambda view: as_list(verdict(view)),
)
