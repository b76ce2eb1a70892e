"""The GQA head-dependency probe, parent side: which KV head does each query head read?

Planned for class targets that take a KV-head count: one run per KV head with
that head perturbed in the child (``kv_perturb``). The module's output is
(b, s, d) after the output projection; the per-query-head outputs are recovered
by undoing the recorded output projection (a square, invertible W_o), so no
change to the module is needed. ``gqa.name_mapping`` then names the grouping:
query head h on KV head h // g (HF ``repeat_kv``, SDPA ``enable_gqa``) passes;
the tiling of ``.repeat`` (h % Hkv) is ATT401. A declaration's ``kv_heads`` (a GQA assignment
under ``attncheck grade``) plans the probe for every class and sets the K/V head count it expects:
a module that does not use that many fails the check instead of skipping it.
"""

from __future__ import annotations

import torch

from attncheck.dynamic.binding.bind import HEADS, KV_HEAD_NAMES, KV_HEADS, Binding
from attncheck.dynamic.probes import precision
from attncheck.dynamic.probes.base import FunctionProbe, JudgeView, Outcome, Planner, as_list
from attncheck.dynamic.probes.gqa_mapping import dependency_matrix, name_mapping
from attncheck.findings import Check

MOVED = precision.TOLERANCE  # a query head "moved" when its output changed by more than float32 rounding


def wanted(binding: Binding) -> bool:
    """A class whose constructor (or config) takes a KV-head count, or declared grouped-query."""
    if not binding.target.is_class:
        return False
    names = {p.name.lower() for p in binding.target.init_params}
    return bool(names & KV_HEAD_NAMES) or "gqa" in binding.target.kinds or _declared(binding) is not None


def _declared(binding: Binding) -> int | None:
    variant = binding.declared_variant
    return variant.kv_heads if variant is not None else None


def kv_heads(binding: Binding) -> int:
    """The K/V head count the module is built with and held to: the declared one, else ``KV_HEADS``."""
    return _declared(binding) or KV_HEADS


def plan(planner: Planner) -> None:
    """One experiment per KV head, with the plain inputs and that head perturbed."""
    binding = planner.binding
    count = kv_heads(binding)
    spec = {"kv_heads": count, "head_dim": binding.dims.d_model // binding.dims.heads}
    for head in range(count):
        planner.add(f"gqa/kv{head}", planner.plain, perturb_kv={**spec, "head": head, "d_model": binding.dims.d_model})


def per_head(judge: JudgeView, name: str, heads: int) -> torch.Tensor:
    """(b, Hq, s, dh) outputs before the output projection (the recorded W_o undone when there is one)."""
    out = judge.output(name)
    o = judge.fit.assignment.projections.o if judge.fit and judge.fit.assignment else None
    if o is not None:
        out = out - o.bias if o.bias is not None else out
        out = out @ torch.linalg.pinv(o.weight.T)
    b, s, d = out.shape
    return out.reshape(b, s, heads, d // heads).transpose(1, 2)


def verdict(judge: JudgeView) -> Outcome | None:
    """The gqa-grouping check, or None when the probe was not planned."""
    count = kv_heads(judge.binding)
    names = [f"gqa/kv{j}" for j in range(count)]
    if names[0] not in judge.experiments:
        return None
    fit = judge.fit
    if fit is None or fit.assignment is None or fit.assignment.kv_heads != count:
        if _declared(judge.binding) is not None:
            used = f"uses {fit.assignment.kv_heads}" if fit and fit.assignment else "matches no reference with"
            detail = f"the module {used} K/V heads for {HEADS} query heads; {count} are asked for"
            return Check("gqa-grouping", "failed", detail), None, ""
        detail = f"the module does not use {count} KV heads for {HEADS} query heads"
        return Check("gqa-grouping", "skipped", detail), None, ""
    if not all(judge.ran(n) for n in ["plain", *names]):
        return Check("gqa-grouping", "skipped", "a head-dependency experiment raised"), None, ""
    base = per_head(judge, "plain", HEADS)
    changed = dependency_matrix(base, [per_head(judge, n, HEADS) for n in names], MOVED)
    if not bool(changed.any()):  # the child found no K/V columns to perturb: no dependency was measured
        detail = ("perturbing each KV head moved no query head: the child could not tell the K/V columns by "
                  "their width (a fused KV projection as wide as the model), so the grouping was not measured")
        return Check("gqa-grouping", "skipped", detail), None, ""
    found = name_mapping(changed)
    status = "failed" if found.code else ("passed" if found.mapping == "grouped" else "failed")
    if found.mapping == "other":
        return Check("gqa-grouping", "failed", found.message), None, ""
    return Check("gqa-grouping", status, found.message), found.code, found.message


PROBE = FunctionProbe(
    "gqa-grouping", ("ATT401",), 20, wanted, plan, lambda view: as_list(verdict(view))
)
