"""The named checks: plan every experiment of a target up front, judge the replies after.

``plan`` builds, in the parent, all inputs a target needs (plain inputs,
perturbed copies, masks in every convention and shape) from a seeded numpy
generator, so one request runs everything in one child and the same seed gives
the same inputs. ``judge`` compares what came back with the float64 reference
and with the properties every attention must have. The child never decides
pass or fail.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from attncheck.dynamic import codes
from attncheck.dynamic.binding.bind import Binding, MaskConvention
from attncheck.dynamic.binding.mask_docs import documented_convention, mask_comments
from attncheck.dynamic.binding.weights import Assignment, assignments, layers_from
from attncheck.dynamic.diagnosis import explain
from attncheck.dynamic.harness.protocol import Experiment
from attncheck.dynamic.probes import structure
from attncheck.dynamic.probes.base import Fit, Plan
from attncheck.dynamic.probes.registry import all_probes
from attncheck.dynamic.probes.sizes import DEFAULT, FUTURE_FROM, QUERY_PROBE, Sizes
from attncheck.dynamic.reference import mha as reference
from attncheck.dynamic.reference import unmodelled, variant_fit, variants
from attncheck.dynamic.reference.tolerance import max_error, tolerance
from attncheck.findings import Check

SHAPES = ("b11k", "bk", "bqk", "b1qk")
CONVENTIONS: tuple[MaskConvention, ...] = ("keep", "blocked", "additive")
PERTURBATION = 1.0
CONVENTION_TEXT = {
    "keep": "bool, True = attend",
    "blocked": "bool, True = masked",
    "additive": "additive float, 0 / large negative",
}
SHAPE_TEXT = {"b11k": "(b, 1, 1, k)", "bk": "(b, k)", "bqk": "(b, q, k)", "b1qk": "(b, 1, q, k)"}


@dataclass
class Verdict:
    """A check and, when it failed, the catalogue code and message of its finding."""

    check: Check
    code: str | None = None
    message: str = ""


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


class _Planner:
    def __init__(self, binding: Binding, prefix: str, seed: int, sizes: Sizes):
        self.binding, self.prefix, self.sizes = binding, prefix, sizes
        self.rng = np.random.default_rng(seed)
        self.tensors: dict[str, np.ndarray] = {}
        self.keep: dict[str, np.ndarray] = {}
        self.experiments: list[Experiment] = []
        self.roles = [role for _, role in binding.forward.roles] if binding.forward else []
        # what the probes' plans read (base.Planner), set by ``plan`` before they run
        self.plain: dict[str, str] = {}
        self.base = np.empty(0)
        self.masks: dict[str, str] = {}
        self.positions = (sizes.batch, 0)

    def tensor(self, name: str, value: np.ndarray) -> str:
        key = f"{self.prefix}/{name}"
        self.tensors[key] = value
        return key

    def shape(self, length: int) -> tuple[int, ...]:
        dims = self.binding.dims
        if self.binding.style == "function":
            return (self.sizes.batch, dims.heads, length, dims.d_model // dims.heads)
        return (self.sizes.batch, length, dims.d_model)

    def random(self, length: int) -> np.ndarray:
        return self.rng.standard_normal(self.shape(length))

    def perturbed(self, base: np.ndarray, where: tuple) -> np.ndarray:
        """A copy of (b, ..., s, d) ``base`` with noise at index ``where`` of (batch, position)."""
        copy = base.copy()
        seq_axis = -2
        moved = np.moveaxis(copy, seq_axis, 1)  # (b, s, ...) view
        moved[where] += PERTURBATION * self.rng.standard_normal(moved[where].shape)
        return copy

    def add(self, name: str, inputs: dict[str, str], mask: str | None = None, **options: Any) -> None:
        self.experiments.append(Experiment(name, inputs, mask, **options))

    def inputs(self, query: str, key: str, value: str) -> dict[str, str]:
        by_role = {"x": query, "query": query, "key": key, "value": value, "kv": key}
        return {role: by_role[role] for role in self.roles}


def plan(binding: Binding, index: int, seed: int, sizes: Sizes = DEFAULT) -> Plan:
    """All experiments for one bound target, with their tensors named ``{index}/...``."""
    planner = _Planner(binding, str(index), seed + index, sizes)
    is_class = binding.target.is_class
    self_style = binding.style == "self"
    q_len, k_len = sizes.lengths(self_style)
    q_base, k_base, v_base = planner.random(q_len), planner.random(k_len), planner.random(k_len)
    if self_style:
        k_base = v_base = q_base
    q, k, v = (planner.tensor(n, t) for n, t in (("q", q_base), ("k", k_base), ("v", v_base)))
    plain = planner.inputs(q, k, v)
    grad = None
    if is_class and binding.style != "function":
        grad = planner.tensor("cotangent", planner.rng.standard_normal((sizes.batch, q_len, binding.dims.width)))
    planner.add("plain", plain, record=True, cotangent=grad)
    batch = [
        planner.tensor(f"{n}_batch", planner.perturbed(t, (1,)))
        for n, t in (("q", q_base), ("k", k_base), ("v", v_base))
    ]
    planner.add(
        "batch",
        planner.inputs(batch[0], batch[0] if self_style else batch[1], batch[0] if self_style else batch[2]),
    )
    s_base = q_base if self_style else planner.random(sizes.seq_self)
    s = q if self_style else planner.tensor("s", s_base)
    future = planner.tensor("s_future", planner.perturbed(s_base, (slice(None), slice(FUTURE_FROM, None))))
    planner.add("future", planner.inputs(future, future, future))
    if self_style:
        permutation = planner.rng.permutation(sizes.seq_self)
        planner.keep["permutation"] = permutation
        permuted = planner.tensor("s_perm", np.take(s_base, permutation, axis=-2))
        planner.add("permuted", planner.inputs(permuted, permuted, permuted))
    else:
        planner.add("self", planner.inputs(s, s, s))
        query = planner.tensor("q_query", planner.perturbed(q_base, (slice(None), QUERY_PROBE)))
        planner.add("query", planner.inputs(query, k, v))
    if binding.forward and binding.forward.mask_name:
        _plan_masks(planner, q_base, k_base, v_base, (q, k, v))
    instance = "dropout" if is_class else "exact"
    for name, mode in (("eval-a", "eval"), ("eval-b", "eval"), ("train-a", "train"), ("train-b", "train")):
        if is_class or mode == "eval":
            planner.add(name, plain, instance=instance, mode=mode)
    planner.plain, planner.base, planner.positions = plain, q_base, (sizes.batch, q_len)
    planner.masks = {k.split("/mask/", 1)[1]: k for k in planner.tensors if "/mask/" in k}
    for probe in all_probes():
        if probe.wanted(binding):
            probe.plan(planner)
    unit = {
        "name": binding.target.name,
        "is_class": is_class,
        "head_dim": binding.dims.width // binding.dims.heads,
        "candidates": [c.to_request() for c in binding.candidates],
        "forward": binding.forward.to_request() if binding.forward else None,
        "experiments": [experiment.to_request() for experiment in planner.experiments],
    }
    return Plan(binding, unit, planner.tensors, planner.keep, sizes)


def _plan_masks(
    planner: _Planner, q_base: np.ndarray, k_base: np.ndarray, v_base: np.ndarray, names: tuple[str, str, str]
) -> None:
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
        masked_inputs = planner.inputs(names[0], k_masked, v_masked)
    plain = planner.inputs(*names)
    for shape in SHAPES:
        for convention in CONVENTIONS:
            combo = f"{shape}/{convention}"
            planner.keep[f"mask/{shape}"] = _shaped(keep, shape if shape.endswith("qk") else "b11k")
            mask = planner.tensor(f"mask/{combo}", _mask_in(_shaped(keep, shape), convention))
            full_mask = planner.tensor(f"full/{combo}", _mask_in(_shaped(full, shape), convention))
            planner.add(f"mask/{combo}", plain, mask)
            planner.add(f"masked/{combo}", masked_inputs, mask)
            planner.add(f"full/{combo}", plain, full_mask)


# ---------------------------------------------------------------- judging


class Judge:
    """Compares one target's replies with the reference and the properties of attention."""

    def __init__(
        self,
        plan: Plan,
        facts: dict[str, Any],
        tensors: dict[str, torch.Tensor],
        static_codes: Collection[str] = (),
    ):
        self.plan, self.facts, self.out = plan, facts, tensors
        self.static_codes = static_codes  # codes the static pass found on this target
        self.binding = plan.binding
        self.style = plan.style
        self.inputs = {name: torch.from_numpy(value) for name, value in plan.tensors.items()}
        self.experiments = {e["name"]: Experiment.from_request(e) for e in plan.unit["experiments"]}
        self.tol = tolerance(torch.float64, 0.0)
        self.fit: Fit | None = None
        self.found_codes: list[str | None] = []  # codes of the checks judged so far (base.JudgeView)
        self.declared_readings: list[Fit] = []  # when nothing fits: the declared variant's readings, closest first
        self.unmodelled = ""  # why the reference cannot model this target (the target is skipped, never ATT903)

    # -- helpers

    def ran(self, name: str) -> bool:
        return self.facts["experiments"].get(name, {}).get("ok", False)

    def output(self, name: str) -> torch.Tensor:
        """An experiment's output with rows as (batch, query, ...)."""
        out = self.out[f"{name}/out"]
        return out.transpose(1, 2) if self.style == "function" and out.ndim == 4 else out

    def role_inputs(self, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        roles = self.experiments[name].inputs
        query = self.inputs[roles.get("query", roles.get("x"))]
        key = self.inputs[roles.get("key", roles.get("kv", roles.get("x")))]
        value = self.inputs[roles.get("value", roles.get("kv", roles.get("x")))]
        return query, key, value

    def reference(self, name: str, keep: torch.Tensor | None, fit: Fit) -> torch.Tensor:
        query, key, value = self.role_inputs(name)
        if self.style == "function":
            causal = reference.causal_keep(query.shape[2], key.shape[2], fit.causal)
            if causal is not None:
                keep = causal if keep is None else keep & causal
            return variants.attend(query, key, value, fit.variant or variants.PLAIN, keep).transpose(1, 2)
        assert fit.assignment is not None
        return reference.mha(
            query,
            key,
            value,
            fit.assignment.projections,
            self.binding.dims.heads,
            num_kv_heads=fit.assignment.kv_heads,
            keep=keep,
            causal=fit.causal,
            rope=explain.rope_for(fit.rope, query, key),
            qk_norm=fit.qk_norm,
            variant=fit.variant,
        )

    def expected_shape(self) -> tuple[int, ...]:
        query = self.role_inputs("plain")[0]
        if self.style == "function":
            return tuple(query.shape)
        return (query.shape[0], query.shape[1], self.binding.dims.width)

    # -- the checks

    def verdicts(self) -> list[Verdict]:
        """Every check; an unexplained mismatch (ATT903) lists the properties that held and failed,
        and gives way to a specific mistake another check named."""
        found = list(self._verdicts())
        if self.binding.target.is_class and self.fit is not None:
            query, key, _ = self.role_inputs("plain")
            outcomes = structure.projections(self.fit.assignment, self.fit.error, self.tol, self.facts.get("grads"))
            found.extend(Verdict(*outcome) for outcome in outcomes)
            found.append(Verdict(*structure.softmax_axis(self.facts.get("softmax"), query.shape[1], key.shape[1])))
        for probe in all_probes():
            self.found_codes = [v.code for v in found]
            found.extend(Verdict(*outcome) for outcome in probe.judge(self))
        if self.ran("plain"):
            found.append(Verdict(*structure.nan_rows(self.output("plain"))))
        named = any(v.code and v.code.startswith(structure.MISTAKE_PREFIXES) for v in found)
        for i, verdict in enumerate(found):
            if verdict.code == codes.REFERENCE_MISMATCH:
                if named:
                    found[i] = Verdict(verdict.check)
                elif why := self.unmodelled or unmodelled.reason(self.facts, *self.lengths()):
                    detail = f"{why} ({verdict.check.detail})"
                    self.unmodelled = self.unmodelled or detail
                    found[i] = Verdict(replace(verdict.check, status="skipped", detail=detail))
                else:
                    properties = [v.check for v in found if v is not verdict]
                    found[i] = replace(verdict, message=structure.unexplained_message(verdict.message, properties))
        return found

    def _verdicts(self) -> Iterator[Verdict]:
        neutral = self.facts.get("neutral_mask")
        mask = f"; the required mask, when no mask is tested: all-keep {neutral[1]} {neutral[0]}" if neutral else ""
        yield Verdict(Check("forward", "passed", f"bound with {self.facts.get('binding')}{mask}"))
        shape_ok = tuple(self.facts["experiments"]["plain"]["shape"]) == self.expected_shape()
        yield self.shape(shape_ok)
        self.fit = self.best_fit() if shape_ok else None
        if self.fit is not None:
            yield self.reference_check()
        if not self.unmodelled or self.fit is not None:  # no reference to try mask conventions against
            yield from self.mask_checks()
        yield self.batch_independence()
        yield self.query_independence()
        yield self.causal_check()
        yield self.weights_sum()
        if self.binding.target.is_class:
            yield self.gradients()
        yield self.eval_determinism()
        if self.binding.target.is_class:
            yield self.dropout_active()

    def shape(self, ok: bool) -> Verdict:
        got = tuple(self.facts["experiments"]["plain"]["shape"])
        detail = f"output shape {got}, expected {self.expected_shape()}"
        if ok:
            return Verdict(Check("output-shape", "passed", detail))
        pooled = unmodelled.own_queries(self.facts.get("softmax"), got, self.expected_shape())
        if pooled:
            self.unmodelled = pooled
            return Verdict(Check("output-shape", "skipped", f"{detail}: {pooled}"))
        return Verdict(
            Check("output-shape", "failed", detail),
            codes.OUTPUT_SHAPE,
            f"output shape {got} differs from the expected {self.expected_shape()}",
        )

    def best_fit(self) -> Fit:
        options: list[reference.Causal] = ["none", "top-left"]
        if self.style != "self":
            options.append("bottom-right")
        if self.style == "function":
            candidates: list[Assignment | None] = [None]
        else:
            layers = layers_from(self.facts.get("layers", []), self.out)
            candidates = list(assignments(layers, self.binding.dims.width, self.binding.dims.heads))
        fits = self._errors([Fit(a, c, 0.0) for a in candidates for c in options])
        matching = [fit for fit in fits if fit.error <= self.tol]
        rotary = "rope" in self.binding.target.kinds and self.style != "function"
        if not matching and rotary:
            specs = explain.rope_candidates(self.binding.dims.d_model // self.binding.dims.heads)
            variant = self.binding.declared_variant
            if variant is not None and variant.rope_base is not None:  # the base a RoPE assignment asks for
                specs = [replace(spec, base=variant.rope_base) for spec in specs]
            matching = [
                f for f in self._errors([replace(f, rope=s) for f in fits for s in specs]) if f.error <= self.tol
            ]
        declared = [] if matching else self._declared_fits(candidates, options, rotary)
        matching = matching or [fit for fit in declared if fit.error <= self.tol]
        if matching:
            return matching[0]
        # Nothing matches: describe the layers in their natural order rather than the least-bad shuffle,
        # inside the variant the module declares (so a mistake is named against that variant).
        natural = sorted((fit for fit in declared or fits if fit.assignment is candidates[0]), key=lambda f: f.error)
        self.declared_readings = natural if declared else []
        return natural[0]

    def _errors(self, fits: list[Fit]) -> list[Fit]:
        output = self.output("plain")
        return [replace(fit, error=max_error(output, self.reference("plain", None, fit))) for fit in fits]

    def _declared_fits(
        self, candidates: list[Assignment | None], options: list[reference.Causal], rotary: bool
    ) -> list[Fit]:
        """Fits with the variant the module declares (its RoPE base and scaling, window, ALiBi...)."""
        query, key, _ = self.role_inputs("plain")
        seq_axis = 2 if self.style == "function" else 1
        declared = variant_fit.Declared(
            self.facts.get("declared") or {},
            self.out,
            self.binding.dims.heads,
            self.binding.dims.d_model // self.binding.dims.heads,
            query.shape[seq_axis],
            key.shape[seq_axis],
        )
        fits = []
        for candidate in variant_fit.candidates(declared, self.static_codes, rotary):
            ropes = [candidate.rope]
            if candidate.rope is None and rotary:
                ropes = list(explain.rope_candidates(declared.head_dim))
            causal_options = ["none"] if candidate.masks_causal else options
            fits += [Fit(a, c, 0.0, rope, candidate) for a in candidates for c in causal_options for rope in ropes]
        return self._errors(fits)

    def describe_fit(self) -> str:
        assert self.fit is not None
        mapping = self.fit.assignment.description if self.fit.assignment else "bare function"
        rope = f"; rotary: {explain.rope_text(self.fit.rope)}" if self.fit.rope else ""
        variant = f"; declared variant: {self.fit.variant.name}" if self.fit.variant else ""
        return f"{mapping}; causal: {self.fit.causal}{rope}{variant}"

    def reference_check(self) -> Verdict:
        assert self.fit is not None
        sizes = self.plan.sizes
        kind = {
            "self": "self-attention",
            "cross": f"cross-attention (query length {sizes.seq_q}, key length {sizes.seq_k})",
            "function": f"attention on (b, h, s, dh) (query length {sizes.seq_q}, key length {sizes.seq_k})",
        }[self.style]
        errors = [(kind, self.fit.error)]
        if self.style != "self" and self.ran("self"):
            errors.append(("self-attention", max_error(self.output("self"), self.reference("self", None, self.fit))))
        worst_kind, worst = max(errors, key=lambda pair: pair[1])
        detail = "; ".join(f"{k}: max error {e:.3g}" for k, e in errors) + f" (tolerance {self.tol:g}); "
        detail += self.describe_fit()
        if worst <= self.tol:
            return Verdict(Check("reference", "passed", detail))
        found = explain.diagnose_judge(self, ["plain", "self"])
        if found is not None:
            return Verdict(Check("reference", "failed", f"{detail}; {found.detail}"), found.code, found.message)
        why = self.unmodelled_construct()
        if why:
            self.unmodelled = f"{why} ({detail})"
            return Verdict(Check("reference", "skipped", self.unmodelled))
        return Verdict(
            Check("reference", "failed", detail),
            codes.REFERENCE_MISMATCH,
            f"output differs from the reference by {worst:.3g} (tolerance {self.tol:g}) on {worst_kind}",
        )

    def lengths(self) -> tuple[int, int]:
        """(query, key) lengths of the plain run."""
        query, key, _ = self.role_inputs("plain")
        return query.shape[-2], key.shape[-2]

    def unmodelled_construct(self) -> str:
        """Why the reference cannot model the plain output ('' when it could have), a scale set on
        purpose included (``unmodelled.reason``, which every skip of a mismatch goes through)."""
        rescaled = None
        if "ATT201" not in self.static_codes and self.fit is not None and self.style != "function":
            query, key, value = self.role_inputs("plain")
            dims, causal = self.binding.dims, self.fit.causal
            layers = layers_from(self.facts.get("layers", []), self.out)

            def scaled(assignment: Assignment) -> unmodelled.Reference:
                return lambda scale: reference.mha(
                    query, key, value, assignment.projections, dims.heads,
                    num_kv_heads=assignment.kv_heads, causal=causal, scale=scale,
                )

            references = (scaled(a) for a in assignments(layers, dims.width, dims.heads))
            rescaled = unmodelled.Rescaled(self.output("plain"), references, dims.width // dims.heads, self.tol)
        return unmodelled.reason(self.facts, *self.lengths(), rescaled)

    def mask_checks(self) -> Iterator[Verdict]:
        if not (self.binding.forward and self.binding.forward.mask_name):
            yield Verdict(Check("reference-masked", "skipped", "forward takes no mask"))
            return
        combos = [f"{s}/{c}" for s in SHAPES for c in CONVENTIONS]
        ran = [c for c in combos if self.ran(f"mask/{c}")]
        refused = self.refused_mask(combos, ran)
        if refused is not None:
            yield refused
            return
        errors = {c: self.masked_error(c) for c in ran}
        matches = [c for c in ran if errors[c] <= self.tol]
        documented = self.binding.declared_mask or documented_convention(self.mask_docs())
        leak = self.masked_keys(self.choose_combo(matches, documented, ran))
        if matches:
            best = min(errors.values())
            yield Verdict(Check("reference-masked", "passed", f"max error {best:.3g} (tolerance {self.tol:g})"))
        else:
            best_combo = min(ran, key=errors.__getitem__)
            text = (
                f"with every mask convention the output differs from the reference "
                f"(best {errors[best_combo]:.3g} with {_combo_text(best_combo)}, tolerance {self.tol:g})"
            )
            combo = self.choose_combo(matches, documented, ran)
            found = explain.diagnose_judge(self, ["plain", "self"], combo) if self.diagnosable() else None
            code = found.code if found is not None and self.fit_ok() else _mask_code(found)
            if found is not None and code is not None:
                yield Verdict(Check("reference-masked", "failed", f"{text}; {found.detail}"), code, found.message)
                if leak.code not in (None, code):
                    leak = Verdict(leak.check)  # the diagnosis names the mistake behind the leak
            else:
                # with a wrong unmasked output, the reference check already names (or fails to name) it
                explained = leak.code == "ATT301" or not self.fit_ok()
                yield Verdict(
                    Check("reference-masked", "failed", text),
                    None if explained else codes.REFERENCE_MISMATCH,
                    f"output differs from the reference with a key-padding mask: {text}",
                )
        yield self.convention_check(matches, documented)
        yield leak
        yield self.fully_masked(self.choose_combo(matches, documented, ran))

    def diagnosable(self) -> bool:
        """A reference configuration was fitted (the output had the expected shape, and a class's
        layers were mapped): the diagnosis has a setting to mutate."""
        return self.fit is not None and (self.style == "function" or self.fit.assignment is not None)

    def refused_mask(self, combos: list[str], ran: list[str]) -> Verdict | None:
        """ATT901 when the mask its documentation promises raises (even if another shape works);
        skipped when every mask the harness guessed raised and nothing promises one of them."""
        shape = self.binding.forward.mask_shape if self.binding.forward else None
        declared = self.binding.declared_mask
        promised = [
            combo
            for combo in combos
            if (shape or declared) and combo.split("/")[0] == (shape or combo.split("/")[0])
            and combo.split("/")[1] == (declared or combo.split("/")[1])
        ]
        if ran and (not promised or set(promised) & set(ran)):
            return None
        first = (promised or combos)[0]
        error = self.facts["experiments"][f"mask/{first}"]["error"]
        if promised:
            source = "declared" if declared else "documented"
            what = f"a mask as {source} ({_combo_text(first)})"
            raised = f"{error['type']}: {error['message']}"
            return Verdict(
                Check("reference-masked", "failed", f"{what} raised {raised}"),
                codes.FORWARD_CRASH,
                f"forward raises on {what}: {raised}",
            )
        tried = "every mask shape and convention the harness tried raised"
        hint = 'declare the mask in pyproject.toml (mask = "keep" | "blocked" | "additive") or document its shape'
        return Verdict(Check("reference-masked", "skipped", f"{tried} ({error['type']}: {error['message']}); {hint}"))

    def fit_ok(self) -> bool:
        """The unmasked output matches the reference: a mask failure is the mask's alone."""
        return self.fit is not None and self.fit.error <= self.tol

    def masked_error(self, combo: str) -> float:
        """Error against the reference with the keep mask this combination's shape expresses."""
        if self.fit is None:
            return float("inf")
        keep = torch.from_numpy(self.plan.keep[f"mask/{combo.split('/')[0]}"])
        if keep.ndim == 3:  # (b, q, k) -> (b, 1, q, k)
            keep = keep.unsqueeze(1)
        return max_error(self.output(f"mask/{combo}"), self.reference(f"mask/{combo}", keep, self.fit))

    def docs(self) -> str:
        return "\n".join(filter(None, [self.binding.target.docstring, self.facts.get("docs")]))

    def mask_docs(self) -> str:
        """Where the module states its mask convention: its docstrings and its comments."""
        return "\n".join(filter(None, [self.docs(), mask_comments(self.facts.get("comments") or "")]))

    @staticmethod
    def choose_combo(matches: list[str], documented: MaskConvention | None, ran: list[str]) -> str:
        """The mask combination the module understands, else the documented (or True = keep) one."""
        if matches:
            preferred = [c for c in matches if documented and c.endswith(f"/{documented}")]
            return (preferred or matches)[0]
        wanted = documented or "keep"
        return next((c for c in ran if c.endswith(f"/{wanted}")), ran[0])

    def convention_check(self, matches: list[str], documented: MaskConvention | None) -> Verdict:
        if not matches:
            return Verdict(Check("mask-convention", "failed", "no mask convention matches the reference"))
        found = {c.split("/")[1] for c in matches}
        first = matches[0]
        detail = f"matches with {_combo_text(first)}"
        if documented is None or documented in found:
            source = f"; documented as {CONVENTION_TEXT[documented]}" if documented else ""
            return Verdict(Check("mask-convention", "passed", detail + source))
        inverse = {"keep": "blocked", "blocked": "keep"}.get(documented)
        detail += f", but its documentation says {CONVENTION_TEXT[documented]}"
        if inverse in found:
            return Verdict(
                Check("mask-convention", "failed", detail),
                "ATT304",
                "mask polarity is inverted (1 = keep vs 1 = masked): the module drops the keys its "
                "documentation says to keep "
                f"(documented {CONVENTION_TEXT[documented]}, behaves as {CONVENTION_TEXT[inverse]})",
            )
        tried = any(self.ran(f"mask/{shape}/{documented}") for shape in SHAPES)
        if found == {"additive"} and tried:  # the documented 0/1 mask ran and did not mask: it is added
            return Verdict(
                Check("mask-convention", "failed", detail),
                "ATT301",
                "a 0/1 mask is added to the scores: the module behaves as if its mask were additive "
                f"(0 / large negative), but its documentation gives {CONVENTION_TEXT[documented]}; adding 1 "
                "to kept keys and 0 to the others blocks nothing. Fix: masked_fill(mask == 0, finfo.min)",
            )
        return Verdict(Check("mask-convention", "passed", detail))

    def masked_keys(self, combo: str) -> Verdict:
        name = "masked-keys"
        if not (self.ran(f"mask/{combo}") and self.ran(f"masked/{combo}")):
            return Verdict(Check(name, "skipped", f"the mask experiment with {_combo_text(combo)} did not run"))
        skip = torch.from_numpy(self.plan.keep["padded"].copy()) if self.style == "self" else None
        change = max_error(self.output(f"masked/{combo}"), self.output(f"mask/{combo}"), skip)
        detail = f"changing masked keys/values moves the output by {change:.3g} ({_combo_text(combo)})"
        if change <= self.tol:
            return Verdict(Check(name, "passed", detail))
        reference_ok = self.fit is not None and self.fit.error <= self.tol
        code = "ATT301" if reference_ok else codes.REFERENCE_MISMATCH
        return Verdict(
            Check(name, "failed", detail),
            code,
            f"masked keys are still attended: perturbing them changes the output by {change:.3g} "
            f"(tolerance {self.tol:g}) with a {_combo_text(combo)} mask",
        )

    def fully_masked(self, combo: str) -> Verdict:
        name = "fully-masked-rows"
        if not self.ran(f"full/{combo}"):
            return Verdict(Check(name, "skipped", f"the fully masked experiment with {_combo_text(combo)} raised"))
        rows = self.output(f"full/{combo}")[1]
        if torch.isnan(rows).any():
            return Verdict(
                Check(name, "failed", "a query that sees no key gets NaN"),
                "ATT303",
                "a query with every key masked yields NaN (SDPA and flash-attn return 0, HF mean(V))",
            )
        what = "0 (like SDPA)" if float(rows.abs().max()) < 1e-6 else "finite values (e.g. mean(V), like HF)"
        return Verdict(Check(name, "passed", f"a query that sees no key gets {what}"))

    def unchanged(self, name: str, baseline: str, rows: Any) -> float | None:
        if not (self.ran(name) and self.ran(baseline)):
            return None
        changed, base = self.output(name)[rows], self.output(baseline)[rows]
        if changed.shape == base.shape:  # NaN in both is no change (a row with no visible key stays NaN)
            both = changed.isnan() & base.isnan()
            changed, base = changed.masked_fill(both, 0.0), base.masked_fill(both, 0.0)
        return max_error(changed, base)

    def batch_independence(self) -> Verdict:
        change = self.unchanged("batch", "plain", (slice(0, 1),))
        if change is None:
            return Verdict(Check("batch-independence", "skipped", "the batch experiment raised"))
        return self._within_tolerance(
            "batch-independence",
            change,
            f"perturbing batch element 1 moves element 0 by {change:.3g}",
            codes.BATCH_LEAK,
            f"batch elements leak into each other: changing element 1 moves element 0 by {change:.3g}",
        )

    def query_independence(self) -> Verdict:
        if self.style == "self":
            return self.permutation()
        others = [i for i in range(self.plan.sizes.seq_q) if i != QUERY_PROBE]
        change = self.unchanged("query", "plain", (slice(None), others))
        if change is None:
            return Verdict(Check("query-independence", "skipped", "the query experiment raised"))
        return self._within_tolerance(
            "query-independence",
            change,
            f"perturbing query {QUERY_PROBE} moves the other queries' outputs by {change:.3g}",
            codes.QUERY_LEAK,
            f"queries leak into each other: changing query {QUERY_PROBE} moves the other outputs by {change:.3g}",
        )

    def is_causal(self) -> tuple[bool, str]:
        target = self.binding.target
        if self.binding.declared_causal is not None:
            return self.binding.declared_causal, "declared in pyproject.toml"
        # is_causal=False, a causal=False default: the word is there, its value is off
        built_non_causal = self.facts.get("flags", {}).get("is_causal") is False or self.binding.code_not_causal
        if "causal" in target.kinds and not built_non_causal:
            return True, "the static pass marked it causal"
        if self.facts.get("causal_buffer"):
            return True, "it holds a triangular mask buffer"
        if re.search(r"causal|autoregressive", f"{target.name}\n{self.docs()}", re.IGNORECASE):
            return True, "its name or documentation says causal"
        if self.fit is not None and self.fit.causal != "none" and self.fit.error <= self.tol:
            return True, f"its output matches the {self.fit.causal} causal reference"
        declared = self.fit.declared if self.fit is not None else None
        if declared is not None and declared.masks_causal:
            return True, f"it declares a causal {declared.variant.name}"
        return False, ""

    def permutation(self) -> Verdict:
        name = "permutation-equivariance"
        if self.is_causal()[0]:
            return Verdict(Check(name, "skipped", "causal attention is not permutation-equivariant"))
        if "rope" in self.binding.target.kinds:
            return Verdict(Check(name, "skipped", "rotary attention depends on positions by design"))
        construct = unmodelled.declared(self.facts.get("declared"))
        if construct:
            return Verdict(Check(name, "skipped", construct))
        variant = self.fit.variant if self.fit is not None else None
        if variant is not None and variant.positional:
            return Verdict(Check(name, "skipped", f"the declared {variant.name} depends on positions by design"))
        if not (self.ran("permuted") and self.ran("plain")):
            return Verdict(Check(name, "skipped", "the permuted experiment raised"))
        permutation = torch.from_numpy(self.plan.keep["permutation"])
        if self.output("plain").shape[1] != len(permutation):  # x-transformers' AttentionPool: learned queries
            return Verdict(Check(name, "skipped", "the output has another number of positions than the input"))
        change = max_error(self.output("permuted"), self.output("plain")[:, permutation])
        detail = f"permuting the tokens permutes the output up to {change:.3g}"
        if change <= self.tol:
            return Verdict(Check(name, "passed", detail))
        return Verdict(
            Check(name, "failed", detail),
            codes.QUERY_LEAK,
            f"token positions leak into each other: permuting the input does not permute the output "
            f"(error {change:.3g}, tolerance {self.tol:g})",
        )

    def causal_check(self) -> Verdict:
        causal, why = self.is_causal()
        if not causal:
            return Verdict(Check("causal", "skipped", "not a causal target"))
        baseline = "plain" if self.style == "self" else "self"
        change = self.unchanged("future", baseline, (slice(None), slice(0, FUTURE_FROM)))
        if change is None:
            return Verdict(Check("causal", "skipped", "the future-leak experiment raised"))
        alignment = self.fit.causal if self.fit else "unknown"
        detail = (
            f"causal because {why}; perturbing tokens >= {FUTURE_FROM} moves earlier outputs "
            f"by {change:.3g}; alignment: {alignment}"
        )
        return self._within_tolerance(
            "causal",
            change,
            detail,
            codes.FUTURE_LEAK,
            f"future tokens leak: changing tokens >= {FUTURE_FROM} moves outputs 0..{FUTURE_FROM - 1} by {change:.3g}",
        )

    def _within_tolerance(self, name: str, change: float, detail: str, code: str, leak: str) -> Verdict:
        """Passed when a perturbation moved the guarded outputs by at most the tolerance;
        else the finding ``code``, whose message is ``leak`` with the tolerance."""
        if change <= self.tol:
            return Verdict(Check(name, "passed", detail))
        return Verdict(Check(name, "failed", detail), code, f"{leak} (tolerance {self.tol:g})")

    def weights_sum(self) -> Verdict:
        weights = self.out.get("plain/weights")
        if weights is None:
            return Verdict(Check("weights-sum", "skipped", "no attention weights returned"))
        if self.fit is not None and self.fit.variant is not None and self.fit.variant.sinks is not None:
            return Verdict(Check("weights-sum", "skipped", "attention sinks take a share of each row by design"))
        rows, columns = weights.sum(-1), weights.sum(-2)
        error = float((rows - 1).abs().max())
        detail = f"weight rows sum to {float(rows.min()):.4g}..{float(rows.max()):.4g}"
        if error <= self.tol:
            return Verdict(Check("weights-sum", "passed", detail))
        if float((columns - 1).abs().max()) <= self.tol:
            return Verdict(
                Check("weights-sum", "failed", detail + "; columns sum to 1"),
                "ATT202",
                "softmax is taken over the query axis: attention weight columns sum to 1, rows to "
                f"{float(rows.min()):.3g}..{float(rows.max()):.3g}",
            )
        return Verdict(
            Check("weights-sum", "failed", detail),
            codes.REFERENCE_MISMATCH,
            f"attention weight rows do not sum to 1 ({float(rows.min()):.3g}..{float(rows.max()):.3g})",
        )

    def gradients(self) -> Verdict:
        grads = self.facts.get("grads")
        if self.facts.get("no_grad"):
            return Verdict(Check("gradients", "skipped", self.facts["no_grad"]))
        if grads is None:
            return Verdict(Check("gradients", "skipped", "backward did not run"))
        if not grads:
            return Verdict(Check("gradients", "skipped", "no parameters"))
        unused = [name for name, norm in grads.items() if norm is None]
        detail = ", ".join(f"{n}: {'none' if g is None else f'{g:.3g}'}" for n, g in grads.items())
        if not unused:
            return Verdict(Check("gradients", "passed", f"every parameter gets a gradient ({detail})"))
        return Verdict(
            Check("gradients", "failed", detail),
            codes.UNUSED_PARAMETER,
            f"parameter(s) {', '.join(unused)} get no gradient from the output",
        )

    def eval_determinism(self) -> Verdict:
        if not (self.ran("eval-a") and self.ran("eval-b")):
            return Verdict(Check("eval-deterministic", "skipped", "the eval experiments raised"))
        a, b = self.output("eval-a").nan_to_num(0.0), self.output("eval-b").nan_to_num(0.0)
        change = float((a - b).abs().max()) if a.shape == b.shape else float("inf")
        detail = f"two eval-mode calls differ by {change:.3g}"
        if change == 0.0:
            return Verdict(Check("eval-deterministic", "passed", detail))
        return Verdict(
            Check("eval-deterministic", "failed", detail),
            codes.EVAL_NONDETERMINISM,
            f"output differs by {change:.3g} between two eval-mode calls (dropout or randomness active in eval mode)",
        )

    def dropout_active(self) -> Verdict:
        dropout = self.facts.get("dropout", {})
        if not (dropout.get("configured") or dropout.get("modules")):
            return Verdict(Check("dropout-active", "skipped", "no dropout argument or module"))
        if not (self.ran("train-a") and self.ran("train-b")):
            return Verdict(Check("dropout-active", "skipped", "the train-mode experiments raised"))
        a, b = self.output("train-a"), self.output("train-b")
        differ = a.shape != b.shape or not torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
        detail = (
            f"dropout set to 0.5: two train-mode calls {'differ' if differ else 'are identical'}; "
            f"dropout modules: {dropout.get('modules', 0)}, called {dropout.get('calls', 0)} times"
        )
        if differ:
            return Verdict(Check("dropout-active", "passed", detail))
        return Verdict(
            Check("dropout-active", "failed", detail),
            "ATT103",
            "attention dropout never takes effect: with p=0.5 two train-mode calls give identical "
            f"outputs (dropout modules called {dropout.get('calls', 0)} times)",
        )


def _mask_code(found: explain.Explanation | None) -> str | None:
    """With the unmasked output wrong too, the masked check names only a mask mistake of the
    diagnosis (a pair: K/V heads tiled and a 0/1 mask added); the reference check names the rest."""
    if found is None:
        return None
    return next((code for code in found.codes if code.startswith("ATT3")), None)


def _combo_text(combo: str) -> str:
    shape, convention = combo.split("/")
    return f"{CONVENTION_TEXT[convention]} {SHAPE_TEXT[shape]}"
