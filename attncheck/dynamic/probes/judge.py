"""One target's shared plan and view: the plain inputs in, the reference fit out; the probes do the rest.

``plan`` draws, in the parent, a target's plain inputs from a seeded numpy generator and lets
every wanted probe (``registry.planning_order``) add its experiments and inputs from the same
generator, so one request runs everything in one child and the same seed gives the same inputs.
``Judge`` is the :class:`base.JudgeView` the probes judge: the replies, the float64 reference and
the configuration that best explains the plain output. ``Judge.verdicts`` collects every probe's
checks in their order and settles an unexplained mismatch (ATT903) against the mistakes the
others named. The child never decides pass or fail.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np
import torch

from attncheck.dynamic import codes
from attncheck.dynamic.binding.bind import Binding
from attncheck.dynamic.binding.weights import Assignment, assignments, layers_from
from attncheck.dynamic.diagnosis import explain
from attncheck.dynamic.harness.protocol import Experiment, ReplyFacts
from attncheck.dynamic.probes import precision
from attncheck.dynamic.probes.base import Fit, Plan
from attncheck.dynamic.probes.registry import all_probes, planning_order
from attncheck.dynamic.probes.sizes import DEFAULT, Sizes
from attncheck.dynamic.reference import (
    channel,
    differential,
    pooling,
    post_norm,
    pre_norm,
    talking_heads,
    unmodelled,
    variant_fit,
    variants,
)
from attncheck.dynamic.reference import mha as reference
from attncheck.dynamic.reference.forms import Form
from attncheck.dynamic.reference.tolerance import max_error
from attncheck.findings import Check

PERTURBATION = 1.0
MISTAKE_PREFIXES = ("ATT1", "ATT2", "ATT3", "ATT4")  # a named mistake, where ATT903 gives way


@dataclass
class Verdict:
    """A check and, when it failed, the catalogue code and message of its finding."""

    check: Check
    code: str | None = None
    message: str = ""


class _Planner:
    """``base.Planner``: one target's tensors, experiments and parent-only arrays, from one generator."""

    def __init__(self, binding: Binding, prefix: str, seed: int, sizes: Sizes, compiled: bool = False):
        self.binding, self.prefix, self.sizes = binding, prefix, sizes
        self.compiled = compiled  # ``compile = true``: torch.compile'd code also runs compiled (``compiled_run``)
        self.rng = np.random.default_rng(seed)
        self.tensors: dict[str, np.ndarray] = {}
        self.keep: dict[str, np.ndarray] = {}
        self.experiments: list[Experiment] = []
        self.roles = [role for _, role in binding.forward.roles] if binding.forward else []
        # the plain run's inputs, set by ``plan`` before the probes plan
        self.plain: dict[str, str] = {}
        self.base = np.empty(0)
        self.arrays = (self.base, self.base, self.base)
        self.names = ("", "", "")
        self.positions = (sizes.batch, 0)

    @property
    def masks(self) -> dict[str, str]:
        return {k.split("/mask/", 1)[1]: k for k in self.tensors if "/mask/" in k}

    def tensor(self, name: str, value: np.ndarray) -> str:
        key = f"{self.prefix}/{name}"
        self.tensors[key] = precision.as_sent(value)  # what the module sees; the Judge reads it back in float64
        return key

    def shape(self, length: int) -> tuple[int, ...]:
        dims = self.binding.dims
        if self.binding.style == "function":
            return (self.sizes.batch, dims.heads, length, dims.d_model // dims.heads)
        return (self.sizes.batch, length, dims.d_model)

    def random(self, length: int) -> np.ndarray:
        return self.rng.standard_normal(self.shape(length))

    def perturbed(self, base: np.ndarray, where: tuple) -> np.ndarray:
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


def plan(binding: Binding, index: int, seed: int, sizes: Sizes = DEFAULT, compiled: bool = False) -> Plan:
    """All experiments for one bound target, with their tensors named ``{index}/...``; ``compiled``:
    the run was asked to run torch.compile'd code compiled too (``compile = true``)."""
    planner = _Planner(binding, str(index), seed + index, sizes, compiled)
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
    planner.plain, planner.base, planner.positions = plain, q_base, (sizes.batch, q_len)
    planner.arrays, planner.names = (q_base, k_base, v_base), (q, k, v)
    for probe in planning_order():
        if probe.wanted(binding):
            probe.plan(planner)
    unit = {
        "name": binding.target.name,
        "is_class": is_class,
        "head_dim": binding.dims.width // binding.dims.heads,
        "candidates": [c.to_request() for c in binding.candidates],
        "forward": binding.forward.to_request() if binding.forward else None,
        "pre_norm": binding.pre_norm,  # the recorder reads that layer's output as the input it normalised
        "experiments": [experiment.to_request() for experiment in planner.experiments],
    }
    return Plan(binding, unit, planner.tensors, planner.keep, sizes)


UNDESCRIBED_PRE_NORM = (
    "its forward applies self.{name} to its input before the projections and adds the input back, and that "
    "layer is no GroupNorm, LayerNorm or RMS norm with an affine weight as wide as the input, which the reference "
    "reads to model the block"
)


class Judge:
    """``base.JudgeView`` of one target's replies: its outputs, the reference and the best fit."""

    def __init__(
        self,
        plan: Plan,
        facts: ReplyFacts,
        tensors: dict[str, torch.Tensor],
        static_codes: Collection[str] = (),
    ):
        self.plan, self.facts, self.out = plan, _with_built_alibi(facts, plan.binding), tensors
        self.static_codes = static_codes  # codes the static pass found on this target
        self.binding = plan.binding
        self.style = plan.style
        self.inputs = {name: precision.as_judged(value) for name, value in plan.tensors.items()}
        self.experiments = {e["name"]: Experiment.from_request(e) for e in plan.unit["experiments"]}
        self.tol = precision.TOLERANCE  # a float32 output against the float64 reference
        self.fit: Fit | None = None
        self.found_codes: list[str | None] = []  # codes of the checks judged so far (base.JudgeView)
        self.declared_readings: list[Fit] = []  # when nothing fits: the declared variant's readings, closest first
        self.form_readings: list[Fit] = []  # when nothing fits: the readings of the module's form, closest first
        self.unmodelled = ""  # why the reference cannot model this target (the target is skipped, never ATT903)
        self.pooling: pooling.Queries | None = None  # the queries a pooling module attends with
        self.post_norm = self._post_norm()
        self.pre_norm = self._pre_norm()
        if self.binding.pre_norm and self.pre_norm is None:
            self.unmodelled = UNDESCRIBED_PRE_NORM.format(name=self.binding.pre_norm)

    # -- helpers

    def ran(self, name: str) -> bool:
        return self.facts["experiments"].get(name, {}).get("ok", False)

    def output(self, name: str) -> torch.Tensor:
        """An experiment's output with rows as (batch, query, ...); a module's (b, d) output, pooled to one
        position with its axis squeezed, as (b, 1, d)."""
        out = self.out[f"{name}/out"]
        if self.style != "function" and out.ndim == 2:
            return out.unsqueeze(1)
        return out.transpose(1, 2) if self.style == "function" and out.ndim == 4 else out

    def plain_shape(self) -> tuple[int, ...]:
        """The plain run's output shape as :meth:`output` lays it out."""
        shape = tuple(self.facts["experiments"]["plain"]["shape"])
        return (shape[0], 1, shape[1]) if self.style != "function" and len(shape) == 2 else shape

    def role_inputs(self, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        roles = self.experiments[name].inputs
        query = self.inputs[roles.get("query", roles.get("x"))]
        key = self.inputs[roles.get("key", roles.get("kv", roles.get("x")))]
        value = self.inputs[roles.get("value", roles.get("kv", roles.get("x")))]
        if self.pooling is not None:
            query = self.pooling.of(query)
        return query, key, value

    def reference(self, name: str, keep: torch.Tensor | None, fit: Fit) -> torch.Tensor:
        query, key, value = self.role_inputs(name)
        if keep is not None and self.binding.mask_replaces_causal:
            fit = replace(fit, causal="none")  # the mask given is the whole mask (``is_causal=mask is None``)
        if self.pooling is not None and keep is not None and keep.ndim == 4:
            keep = self.pooling.keep_rows(keep)
        if self.style == "function":
            causal = reference.causal_keep(query.shape[2], key.shape[2], fit.causal)
            if causal is not None:
                keep = causal if keep is None else keep & causal
            return variants.attend(query, key, value, fit.variant or variants.PLAIN, keep).transpose(1, 2)
        assert fit.assignment is not None
        if fit.form is not None:
            return fit.form(query, key, value, fit.assignment.projections, keep)
        block_input = query
        if self.pre_norm is not None:  # a VAE block: q, k, v read the module's norm of its input
            query, key, value = (self.pre_norm[1](t) for t in (query, key, value))
        attended = reference.mha(
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
        if self.pre_norm is not None:
            return pre_norm.residual(attended, block_input)
        return attended if self.post_norm is None else self.post_norm[1](attended, query)

    def _post_norm(self) -> tuple[str, post_norm.PostHook] | None:
        """The module's own norm of its output plus its input, when its forward ends so (TVP); None otherwise."""
        if not self.binding.post_norm:
            return None
        found = post_norm.hooks(self.facts.get("declared"), self.out, self.binding.dims.width)
        return found[0] if found else None

    def _pre_norm(self) -> tuple[str, pre_norm.PreHook] | None:
        """The module's own norm of its input before the projections, when its forward adds that input back
        (a VAE / U-Net block); None otherwise."""
        if not self.binding.pre_norm:
            return None
        found = pre_norm.hook(self.binding.pre_norm, self.facts.get("declared"), self.out, self.binding.dims.width)
        return (self.binding.pre_norm, found) if found is not None else None

    def lengths(self) -> tuple[int, int]:
        """(query, key) lengths of the plain run."""
        query, key, _ = self.role_inputs("plain")
        return query.shape[-2], key.shape[-2]

    def expected_shape(self) -> tuple[int, ...]:
        query = self.role_inputs("plain")[0]
        if self.style == "function":
            return tuple(query.shape)
        return (query.shape[0], query.shape[1], self.binding.dims.width)

    # -- the checks

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

    def docs(self) -> str:
        return "\n".join(filter(None, [self.binding.target.docstring, self.facts.get("docs")]))

    def masked_error(self, combo: str, fit: Fit | None = None) -> float:
        """Error against the reference (of ``fit``, else the fitted one) with the keep mask this combination's
        shape expresses."""
        fit = fit or self.fit
        if fit is None:
            return float("inf")
        keep = torch.from_numpy(self.plan.keep[f"mask/{combo.split('/')[0]}"])
        if keep.ndim == 3:  # (b, q, k) -> (b, 1, q, k)
            keep = keep.unsqueeze(1)
        return max_error(self.output(f"mask/{combo}"), self.reference(f"mask/{combo}", keep, fit))

    def best_fit(self) -> Fit:
        options: list[reference.Causal] = ["none", "top-left"]
        if self.style != "self":
            options.append("bottom-right")
        if self.style == "function":
            candidates: list[Assignment | None] = [None]
        else:
            layers = layers_from(self.facts.get("layers", []), self.out)
            if self.pooling is not None:
                layers = self.pooling.layers(layers)
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
        whole = [] if matching else self._form_fits(candidates)
        matching = matching or [fit for fit in whole if fit.error <= self.tol]
        if matching:
            return matching[0]
        whole = sorted(whole, key=lambda fit: fit.error)
        if whole and whole[0].error < min(fit.error for fit in declared or fits):
            # the module is closer to that form than to token attention: its mistakes are named against the form
            self.declared_readings = []
            self.form_readings = whole
            return whole[0]
        # Nothing matches: describe the layers in their natural order rather than the least-bad shuffle,
        # inside the variant the module declares (so a mistake is named against that variant).
        natural = sorted((fit for fit in declared or fits if fit.assignment is candidates[0]), key=lambda f: f.error)
        self.declared_readings = natural if declared else []
        return natural[0]

    def _pooled_fit(self, got: tuple[int, ...]) -> Fit | None:
        """The best fit of a pooling module (its output fewer positions, each a softmax row over every key),
        with ``pooling`` set to the queries it attends with (rows of its input, or its own); None otherwise."""
        expected = self.expected_shape()
        count = pooling.pooled_rows(self.facts.get("softmax"), got, expected)
        if count is None:
            return None
        errors = []
        for rows in pooling.choices(count, expected[1], self.facts.get("layers", []), self.out):
            self.pooling = rows
            errors.append((self.best_fit().error, rows))
        if not errors:
            return None
        self.pooling = min(errors, key=lambda pair: pair[0])[1]
        return self.best_fit()  # again, so that the declared readings are those of the rows chosen

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

    def _form_fits(self, candidates: list[Assignment | None]) -> list[Fit]:
        """Fits of a whole form the module computes, in the readings its parameters admit: attention over
        channels (its softmax over (head_dim, head_dim) scores), talking heads (recorded (h, h) layers that
        read neither input), differential attention (its λ parameters); empty for plain token attention."""
        if self.style != "self":
            return []
        q_len, k_len = self.lengths()
        width = self.binding.dims.width
        forms: list[Form] = []
        heads = channel.channel_heads(self.facts.get("softmax"), width, q_len, k_len)
        if heads is not None:
            forms += channel.forms(self.facts.get("declared"), self.out, heads, width, q_len)
        forms += talking_heads.forms(layers_from(self.facts.get("layers", []), self.out), width)
        forms += differential.forms(self.facts.get("declared"), self.out, width)
        return self._errors([Fit(a, "none", 0.0, form=form) for a in candidates if a is not None for form in forms])

    def describe_fit(self) -> str:
        assert self.fit is not None
        mapping = self.fit.assignment.description if self.fit.assignment else "bare function"
        rope = f"; rotary: {explain.rope_text(self.fit.rope)}" if self.fit.rope else ""
        variant = f"; declared variant: {self.fit.variant.name}" if self.fit.variant else ""
        pooled = f"; {self.pooling.text}" if self.pooling is not None and self.fit.error <= self.tol else ""
        whole = f"; {self.fit.form.text}" if self.fit.form is not None else ""
        norm = f"; then the module's {self.post_norm[0]}(output + input)" if self.post_norm is not None else ""
        if self.pre_norm is not None:
            norm = f"; on the module's {self.pre_norm[0]}(input), the input added back"
        return f"{mapping}; causal: {self.fit.causal}{rope}{variant}{pooled}{whole}{norm}"

    def verdicts(self) -> list[Verdict]:
        """Every probe's checks; an unexplained mismatch (ATT903) lists the properties that held and
        failed, and gives way to a specific mistake another check named."""
        got = self.plain_shape()
        shape_ok = got == self.expected_shape()
        self.fit = self.best_fit() if shape_ok else None
        if not shape_ok and self.style != "function":
            self.fit = self._pooled_fit(got)
        found: list[Verdict] = []
        for probe in all_probes():
            self.found_codes = [v.code for v in found]
            found.extend(Verdict(*outcome) for outcome in probe.judge(self))
        named = any(v.code and v.code.startswith(MISTAKE_PREFIXES) for v in found)
        for i, verdict in enumerate(found):
            if verdict.code == codes.REFERENCE_MISMATCH:
                if named:
                    found[i] = Verdict(verdict.check)
                elif why := self.unmodelled or self.binding.unmodelled or unmodelled.reason(
                    self.facts, *self.lengths()
                ):
                    detail = f"{why} ({verdict.check.detail})"
                    self.unmodelled = self.unmodelled or detail
                    found[i] = Verdict(replace(verdict.check, status="skipped", detail=detail))
                else:
                    properties = [v.check for v in found if v is not verdict]
                    found[i] = replace(verdict, message=_unexplained_message(verdict.message, properties))
        return found


def _with_built_alibi(facts: ReplyFacts, binding: Binding) -> ReplyFacts:
    """The reply of a forward that was given the ALiBi bias its model builds (``alibi:<helper>``, BLOOM's
    ``build_alibi_tensor``) declares ALiBi: the reference adds it with the standard slopes the helper uses."""
    forward = binding.forward
    if forward is None or not any(kind.startswith("alibi:") for _, kind in forward.generated):
        return facts
    declared = dict(facts.get("declared") or {})
    declared["scalars"] = {**declared.get("scalars", {}), "alibi": True}
    return cast(ReplyFacts, {**facts, "declared": declared})


def _unexplained_message(message: str, properties: Sequence[Check]) -> str:
    """The ATT903 message with the properties that held and failed, since no mutant matched."""
    held = [c.name for c in properties if c.status == "passed"]
    failed = [c.name for c in properties if c.status == "failed"]
    parts = [message, "no known mistake (alone or in pairs) explains it"]
    if held:
        parts.append(f"held: {', '.join(held)}")
    if failed:
        parts.append(f"failed: {', '.join(failed)}")
    return "; ".join(parts)
