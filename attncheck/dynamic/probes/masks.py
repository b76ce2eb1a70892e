"""The padding-mask probe: which mask convention and shape the module understands, and whether it masks.

A forward that takes a mask gets one key-padding mask in every convention (True = keep, True =
masked, additive) and every shape (``SHAPES``), each run three ways: on the plain inputs (compared
with the masked reference), with the masked keys/values perturbed (a mask that masks is blind to
them) and with every key of batch 1 masked (a query that sees no key must not get NaN). Judged:
"reference-masked" (a convention that matches the reference; ATT901 when the mask the module
documents or declares raises), "mask-convention" (ATT304 inverted polarity, ATT301 a 0/1 mask
added to the scores), "masked-keys" (ATT301 masked keys still attended) and "fully-masked-rows"
(ATT303 NaN).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from attncheck.dynamic import codes
from attncheck.dynamic.binding.bind import Binding, MaskConvention
from attncheck.dynamic.binding.mask_docs import documented_convention, mask_comments
from attncheck.dynamic.diagnosis import explain
from attncheck.dynamic.probes.base import FunctionProbe, JudgeView, Outcome, Planner
from attncheck.dynamic.reference.tolerance import max_error
from attncheck.findings import Check

SHAPES = ("b11k", "bk", "bqk", "b1qk")
CONVENTIONS: tuple[MaskConvention, ...] = ("keep", "blocked", "additive")
CONVENTION_TEXT = {
    "keep": "bool, True = attend",
    "blocked": "bool, True = masked",
    "additive": "additive float, 0 / large negative",
}
RANKS = {"b11k": 4, "bk": 2, "bqk": 3, "b1qk": 4}
SHAPE_TEXT = {"b11k": "(b, 1, 1, k)", "bk": "(b, k)", "bqk": "(b, q, k)", "b1qk": "(b, 1, q, k)"}


def _mask_in(keep: np.ndarray, convention: MaskConvention) -> np.ndarray:
    if convention == "keep":
        return keep
    if convention == "blocked":
        return ~keep
    return np.where(keep, 0.0, np.finfo(np.float32).min)  # as a model fills: survives the code's .float()


def _shaped(keep_bqk: np.ndarray, shape: str) -> np.ndarray:
    """A (b, q, k) keep mask that is constant over q, or not for the per-query shapes, laid out as asked."""
    return {
        "b11k": lambda m: m[:, :1][:, None],
        "bk": lambda m: m[:, 0],
        "bqk": lambda m: m,
        "b1qk": lambda m: m[:, None],
    }[shape](keep_bqk)


def _padding(batch: int, q_len: int, k_len: int, fully_masked: bool) -> tuple[np.ndarray, np.ndarray]:
    """(b, k) key padding and a (b, q, k) keep mask; batch 1 sees nothing when ``fully_masked``."""
    pad = np.ones((batch, k_len), dtype=bool)
    pad[0, -2:] = False
    pad[1, [1, 4]] = False
    if fully_masked:
        pad[1] = False
    per_query = np.repeat(pad[:, None, :], q_len, axis=1)
    if not fully_masked:
        per_query[0, min(3, q_len - 1), 2] = False
    return pad, per_query


def wanted(binding: Binding) -> bool:
    """A forward with a mask parameter."""
    return bool(binding.forward and binding.forward.mask_name)


def plan(planner: Planner) -> None:
    """Every shape and convention of one padding mask, on the plain inputs, the masked rows perturbed, all masked."""
    q_base, k_base, v_base = planner.arrays
    self_style = planner.binding.style == "self"
    q_len, k_len = q_base.shape[-2], k_base.shape[-2]
    batch = planner.sizes.batch
    pad, keep = _padding(batch, q_len, k_len, fully_masked=False)
    _, full = _padding(batch, q_len, k_len, fully_masked=True)
    planner.keep["padded"] = ~pad
    hidden = (~pad).nonzero()
    if self_style:
        perturbed = planner.tensor("q_masked", planner.perturbed(q_base, hidden))
        masked_inputs = planner.inputs(perturbed, perturbed, perturbed)
    else:
        k_masked = planner.tensor("k_masked", planner.perturbed(k_base, hidden))
        v_masked = planner.tensor("v_masked", planner.perturbed(v_base, hidden))
        masked_inputs = planner.inputs(planner.names[0], k_masked, v_masked)
    plain = planner.inputs(*planner.names)
    for shape in SHAPES:
        for convention in CONVENTIONS:
            combo = f"{shape}/{convention}"
            planner.keep[f"mask/{shape}"] = _shaped(keep, shape if shape.endswith("qk") else "b11k")
            mask = planner.tensor(f"mask/{combo}", _mask_in(_shaped(keep, shape), convention))
            full_mask = planner.tensor(f"full/{combo}", _mask_in(_shaped(full, shape), convention))
            planner.add(f"mask/{combo}", plain, mask)
            planner.add(f"masked/{combo}", masked_inputs, mask)
            planner.add(f"full/{combo}", plain, full_mask)


def judge(view: JudgeView) -> list[Outcome]:
    """reference-masked, then (when a mask ran) mask-convention, masked-keys and fully-masked-rows."""
    if view.unmodelled and view.fit is None:
        return []  # no reference to try mask conventions against
    if not wanted(view.binding):
        return [(Check("reference-masked", "skipped", "forward takes no mask"), None, "")]
    if view.fit is not None and view.fit.form is not None and view.fit.form.masked:
        return [(Check("reference-masked", "skipped", view.fit.form.masked), None, "")]
    combos = [f"{s}/{c}" for s in SHAPES for c in CONVENTIONS]
    rank = _tiled_rank(view)
    # a mask of another rank than the one the code tiles it to may run (``.repeat`` prepends axes) but
    # is no input the code promises to accept: what it does with one blames nobody
    ran = [c for c in combos if view.ran(f"mask/{c}") and rank in (None, RANKS[c.split("/")[0]])]
    refused = _refused_mask(view, combos, ran)
    if refused is not None:
        return [refused]
    errors = {c: view.masked_error(c) for c in ran}
    matches = [c for c in ran if errors[c] <= view.tol]
    documented = stated_convention(view)
    combo = choose_combo(matches, documented, ran)
    leak = _masked_keys(view, combo)
    if matches:
        best = min(errors.values())
        found: list[Outcome] = [
            (Check("reference-masked", "passed", f"max error {best:.3g} (tolerance {view.tol:g})"), None, "")
        ]
    elif view.unmodelled:  # no convention can match a reference that does not model the module, so none is
        # known, and the masked-keys check would judge the module by a convention it may not use
        return [(Check("reference-masked", "skipped", view.unmodelled), None, "")]
    else:
        found, leak = _mismatch(view, errors, ran, combo, leak)
    return [*found, _convention(view, matches, documented), leak, _fully_masked(view, combo)]


def _mismatch(
    view: JudgeView, errors: dict[str, float], ran: list[str], combo: str, leak: Outcome
) -> tuple[list[Outcome], Outcome]:
    """reference-masked failed: the diagnosis's mistake when it names one (which then explains the
    leak too), else ATT903 unless the leak or the unmasked reference check already says why."""
    best_combo = min(ran, key=errors.__getitem__)
    text = (
        f"with every mask convention the output differs from the reference "
        f"(best {errors[best_combo]:.3g} with {combo_text(best_combo)}, tolerance {view.tol:g})"
    )
    dropped = _causal_dropped(view, ran)
    if dropped is not None:  # the future keys it attends are the "masked keys" the leak check perturbs
        return [dropped], (leak[0], None, "") if leak[1] == "ATT301" else leak
    found = None
    if _diagnosable(view):
        diagnosed, found = _fewest_mistakes(view, combo, best_combo)
        if diagnosed != combo:  # the masked keys are judged in the convention the diagnosis chose
            combo, leak = diagnosed, _masked_keys(view, diagnosed)
    code = found.code if found is not None and _fit_ok(view) else _mask_code(found)
    if found is not None and code is not None:
        if leak[1] not in (None, code):
            leak = (leak[0], None, "")  # the diagnosis names the mistake behind the leak
        return [(Check("reference-masked", "failed", f"{text}; {found.detail}"), code, found.message)], leak
    # with a wrong unmasked output, the reference check already names (or fails to name) it
    explained = leak[1] == "ATT301" or not _fit_ok(view)
    return [
        (
            Check("reference-masked", "failed", text),
            None if explained else codes.REFERENCE_MISMATCH,
            f"output differs from the reference with a key-padding mask: {text}",
        )
    ], leak


def _causal_dropped(view: JudgeView, ran: list[str]) -> Outcome | None:
    """ATT906 when a causal module given a mask attends to the future: with the mask, the output is the
    reference without the causal mask (``is_causal=mask is None``, ``if mask is None: mask = causal``),
    and the mask given is one the module documents as key padding alone, which cannot carry causality.
    None when the module is not causal, or the output is something else."""
    if view.fit is None or view.fit.causal == "none" or view.binding.mask_replaces_causal:
        return None
    unmasked_future = replace(view.fit, causal="none")
    matching = [c for c in ran if view.masked_error(c, unmasked_future) <= view.tol]
    if not matching:
        return None
    combo = choose_combo(matching, stated_convention(view), matching)
    detail = f"with {combo_text(combo)} the output is the reference without its causal mask"
    message = (
        "future tokens leak whenever a mask is given: the causal mask is dropped when a padding mask is passed "
        f"({detail}). Fix: combine them (keep = causal & padding) and pass the combined mask"
    )
    return Check("reference-masked", "failed", detail), "ATT906", message


def _tiled_rank(view: JudgeView) -> int | None:
    """The rank the forward tiles its mask to (``mask.repeat(1, n, 1, 1)``: 4), if it tiles it."""
    return view.binding.forward.mask_rank if view.binding.forward else None


def _fewest_mistakes(view: JudgeView, combo: str, closest: str) -> tuple[str, explain.Explanation | None]:
    """The diagnosis on ``combo`` (the documented convention, else True = keep), or on the convention
    closest to the reference where that one needs fewer mistakes and no convention is stated: a module
    whose API adds its mask, given the harness's bool one, is not also "adding a 0/1 keep-mask" because
    a scale mistake keeps every convention from matching."""
    found = explain.diagnose_judge(view, ["plain", "self"], combo)
    if closest == combo or stated_convention(view) is not None:
        return combo, found
    other = explain.diagnose_judge(view, ["plain", "self"], closest)
    if other is not None and (found is None or len(other.codes) < len(found.codes)):
        return closest, other
    return combo, found


def _diagnosable(view: JudgeView) -> bool:
    """A reference configuration was fitted (the output had the expected shape, and a class's
    layers were mapped): the diagnosis has a setting to mutate."""
    return view.fit is not None and (view.style == "function" or view.fit.assignment is not None)


def _fit_ok(view: JudgeView) -> bool:
    """The unmasked output matches the reference: a mask failure is the mask's alone."""
    return view.fit is not None and view.fit.error <= view.tol


def _refused_mask(view: JudgeView, combos: list[str], ran: list[str]) -> Outcome | None:
    """ATT901 when the mask its documentation promises raises (even if another shape works);
    skipped when every mask the harness guessed raised and nothing promises one of them."""
    shape = view.binding.forward.mask_shape if view.binding.forward else None
    declared = view.binding.declared_mask
    promised = [
        combo
        for combo in combos
        if (shape or declared) and combo.split("/")[0] == (shape or combo.split("/")[0])
        and combo.split("/")[1] == (declared or combo.split("/")[1])
    ]
    if ran and (not promised or set(promised) & set(ran)):
        return None
    first = (promised or combos)[0]
    error = view.facts["experiments"][f"mask/{first}"]["error"]
    if promised:
        source = "declared" if declared else "documented"
        what = f"a mask as {source} ({combo_text(first)})"
        raised = f"{error['type']}: {error['message']}"
        return (
            Check("reference-masked", "failed", f"{what} raised {raised}"),
            codes.FORWARD_CRASH,
            f"forward raises on {what}: {raised}",
        )
    tried = "every mask shape and convention the harness tried raised"
    rank = _tiled_rank(view)
    if rank is not None:
        tried = f"every {rank}-D mask the harness tried (the rank the code tiles it to) raised"
    hint = 'declare the mask in pyproject.toml (mask = "keep" | "blocked" | "additive") or document its shape'
    return Check("reference-masked", "skipped", f"{tried} ({error['type']}: {error['message']}); {hint}"), None, ""


def stated_convention(view: JudgeView) -> MaskConvention | None:
    """The mask convention the module states: declared in pyproject.toml, else in its docstrings or in
    its comments that speak of a mask."""
    docs = "\n".join(filter(None, [view.docs(), mask_comments(view.facts.get("comments") or "")]))
    return view.binding.declared_mask or documented_convention(docs)


def choose_combo(matches: list[str], documented: MaskConvention | None, ran: list[str]) -> str:
    """The mask combination the module understands, else the documented (or True = keep) one."""
    if matches:
        preferred = [c for c in matches if documented and c.endswith(f"/{documented}")]
        return (preferred or matches)[0]
    wanted = documented or "keep"
    return next((c for c in ran if c.endswith(f"/{wanted}")), ran[0])


def _convention(view: JudgeView, matches: list[str], documented: MaskConvention | None) -> Outcome:
    if not matches:
        return Check("mask-convention", "failed", "no mask convention matches the reference"), None, ""
    found = {c.split("/")[1] for c in matches}
    first = matches[0]
    detail = f"matches with {combo_text(first)}"
    if documented is None or documented in found:
        source = f"; documented as {CONVENTION_TEXT[documented]}" if documented else ""
        return Check("mask-convention", "passed", detail + source), None, ""
    inverse = {"keep": "blocked", "blocked": "keep"}.get(documented)
    detail += f", but its documentation says {CONVENTION_TEXT[documented]}"
    if inverse in found:
        return (
            Check("mask-convention", "failed", detail),
            "ATT304",
            "mask polarity is inverted (1 = keep vs 1 = masked): the module drops the keys its "
            "documentation says to keep "
            f"(documented {CONVENTION_TEXT[documented]}, behaves as {CONVENTION_TEXT[inverse]})",
        )
    tried = any(view.ran(f"mask/{shape}/{documented}") for shape in SHAPES)
    if found == {"additive"} and tried:  # the documented 0/1 mask ran and did not mask: it is added
        return (
            Check("mask-convention", "failed", detail),
            "ATT301",
            "a 0/1 mask is added to the scores: the module behaves as if its mask were additive "
            f"(0 / large negative), but its documentation gives {CONVENTION_TEXT[documented]}; adding 1 "
            "to kept keys and 0 to the others blocks nothing. Fix: masked_fill(mask == 0, finfo.min)",
        )
    return Check("mask-convention", "passed", detail), None, ""


def _masked_keys(view: JudgeView, combo: str) -> Outcome:
    name = "masked-keys"
    if not (view.ran(f"mask/{combo}") and view.ran(f"masked/{combo}")):
        return Check(name, "skipped", f"the mask experiment with {combo_text(combo)} did not run"), None, ""
    skip = torch.from_numpy(view.plan.keep["padded"].copy()) if view.style == "self" else None
    change = max_error(view.output(f"masked/{combo}"), view.output(f"mask/{combo}"), skip)
    detail = f"changing masked keys/values moves the output by {change:.3g} ({combo_text(combo)})"
    if change <= view.tol:
        return Check(name, "passed", detail), None, ""
    reference_ok = view.fit is not None and view.fit.error <= view.tol
    code = "ATT301" if reference_ok else codes.REFERENCE_MISMATCH
    return (
        Check(name, "failed", detail),
        code,
        f"masked keys are still attended: perturbing them changes the output by {change:.3g} "
        f"(tolerance {view.tol:g}) with a {combo_text(combo)} mask",
    )


def _fully_masked(view: JudgeView, combo: str) -> Outcome:
    name = "fully-masked-rows"
    if not view.ran(f"full/{combo}"):
        return Check(name, "skipped", f"the fully masked experiment with {combo_text(combo)} raised"), None, ""
    rows = view.output(f"full/{combo}")[1]
    if torch.isnan(rows).any():
        return (
            Check(name, "failed", "a query that sees no key gets NaN"),
            "ATT303",
            "a query with every key masked yields NaN (SDPA and flash-attn return 0, HF mean(V))",
        )
    what = "0 (like SDPA)" if float(rows.abs().max()) < 1e-6 else "finite values (e.g. mean(V), like HF)"
    return Check(name, "passed", f"a query that sees no key gets {what}"), None, ""


def _mask_code(found: explain.Explanation | None) -> str | None:
    """With the unmasked output wrong too, the masked check names only a mask mistake of the
    diagnosis (a pair: K/V heads tiled and a 0/1 mask added); the reference check names the rest."""
    if found is None:
        return None
    return next((code for code in found.codes if code.startswith("ATT3")), None)


def combo_text(combo: str) -> str:
    """A mask combination ("shape/convention") in words."""
    shape, convention = combo.split("/")
    return f"{CONVENTION_TEXT[convention]} {SHAPE_TEXT[shape]}"


PROBE = FunctionProbe(
    "masks",
    tuple(sorted({"ATT301", "ATT303", "ATT304", codes.FORWARD_CRASH, codes.REFERENCE_MISMATCH,
                  *explain.DIAGNOSED_CODES})),
    2,
    wanted,
    plan,
    judge,
    plan_order=4,  # drawn after the leak probes' inputs, as they were before probes were modules
)
