"""The probe contract: what a probe declares, when it applies, what it asks the child, how it judges.

A probe is one module under ``dynamic/probes/`` holding a ``PROBE`` object that satisfies
:class:`Probe`. ``registry.all_probes`` finds them; ``judge.plan`` draws a target's plain inputs
and lets each wanted probe add its experiments through a :class:`Planner`, and ``judge.Judge``
hands each a :class:`JudgeView` of the child's replies. Both sides are typed here so that a probe
never reaches into the judge.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from attncheck.dynamic.binding.bind import Binding
from attncheck.dynamic.binding.weights import Assignment
from attncheck.dynamic.harness.protocol import Experiment, ReplyFacts
from attncheck.dynamic.probes.sizes import DEFAULT, Sizes
from attncheck.dynamic.reference import mha as reference
from attncheck.dynamic.reference.forms import Form
from attncheck.dynamic.reference.pooling import Queries
from attncheck.dynamic.reference.post_norm import PostHook
from attncheck.dynamic.reference.pre_norm import PreHook
from attncheck.dynamic.reference.rope import RopeSpec
from attncheck.dynamic.reference.variant_fit import Candidate
from attncheck.dynamic.reference.variants import Variant
from attncheck.findings import Check

Outcome = tuple[Check, str | None, str]  # a check, and when it failed the code and message of its finding

@dataclass
class Plan:
    """Everything one target's unit needs: the request part, its tensors, and what the parent keeps."""

    binding: Binding
    unit: dict[str, Any]
    tensors: dict[str, np.ndarray]
    keep: dict[str, np.ndarray] = field(default_factory=dict)  # parent-only: keep masks, perturbed rows
    sizes: Sizes = DEFAULT  # the batch and sequence lengths the inputs were planned with

    @property
    def style(self) -> str:
        return self.binding.style


@dataclass
class Fit:
    """The reference configuration that best explains the plain output."""

    assignment: Assignment | None
    causal: reference.Causal
    error: float
    rope: RopeSpec | None = None
    declared: Candidate | None = None  # the variant the module declares, when plain does not fit
    form: Form | None = None  # a whole form the token reference does not compute (channel attention, talking heads)

    @property
    def variant(self) -> Variant | None:
        return self.declared.variant if self.declared is not None else None

    @property
    def qk_norm(self) -> reference.RopeHook | None:
        return self.declared.qk_norm if self.declared is not None else None


class Planner(Protocol):
    """What a probe's ``plan`` may read and add: the target, its plain inputs, named tensors, experiments."""

    binding: Binding
    plain: dict[str, str]  # role -> tensor name of the plain run's inputs
    base: np.ndarray  # the plain query input, (batch, seq, d) or (batch, heads, seq, dh)
    arrays: tuple[np.ndarray, np.ndarray, np.ndarray]  # the plain query, key and value inputs
    names: tuple[str, str, str]  # their tensor names
    positions: tuple[int, int]  # (batch, seq) of the plain query
    sizes: Sizes  # the run's batch and sequence lengths (``sizes.drawn`` under ``attncheck grade``)
    rng: np.random.Generator  # the target's seeded generator, shared in planning order (``registry``)
    keep: dict[str, np.ndarray]  # parent-only arrays the probe's judge reads back from ``Plan.keep``
    compiled: bool  # ``compile = true``: torch.compile'd code is also run compiled (``compiled_run``)

    @property
    def masks(self) -> dict[str, str]:
        """"shape/convention" -> tensor name of the padding masks planned so far."""
        ...

    def tensor(self, name: str, value: np.ndarray) -> str: ...
    def add(self, name: str, inputs: dict[str, str], mask: str | None = None, **options: Any) -> None: ...
    def inputs(self, query: str, key: str, value: str) -> dict[str, str]:
        """Role -> tensor name for the target's forward, from tensors named by query, key and value."""
        ...

    def random(self, length: int) -> np.ndarray:
        """A fresh input like the plain query, ``length`` tokens long."""
        ...

    def perturbed(self, base: np.ndarray, where: tuple) -> np.ndarray:
        """A copy of ``base`` with noise at index ``where`` of (batch, position)."""
        ...


class JudgeView(Protocol):
    """What a probe's ``judge`` (and the diagnosis) reads from ``judge.Judge``."""

    style: str
    tol: float
    static_codes: Collection[str]  # codes the static pass found on this target
    found_codes: Sequence[str | None]  # codes of the checks judged before this probe
    fit: Fit | None
    declared_readings: Sequence[Fit]  # when nothing fits: the declared variant's readings, closest first
    form_readings: Sequence[Fit]  # when nothing fits: the readings of the form the module computes, closest first
    binding: Binding
    plan: Plan
    facts: ReplyFacts  # the child's reply for this target, checked
    out: dict[str, torch.Tensor]
    experiments: dict[str, Experiment]
    unmodelled: str  # why the reference cannot model this target, noted by the reference probe
    pooling: Queries | None  # the queries a pooling module attends with (its class token's, or its own)
    post_norm: tuple[str, PostHook] | None  # the module's own norm(output + input) and its layer's name (TVP)
    pre_norm: tuple[str, PreHook] | None  # the norm q, k, v read of a block's input, which it adds back (VAE)

    def is_causal(self) -> tuple[bool, str]: ...
    def docs(self) -> str: ...
    def expected_shape(self) -> tuple[int, ...]: ...
    def plain_shape(self) -> tuple[int, ...]: ...  # the plain run's output shape, a squeezed pooling as (b, 1, d)
    def lengths(self) -> tuple[int, int]: ...  # (query, key) lengths of the plain run
    def describe_fit(self) -> str: ...
    def ran(self, name: str) -> bool: ...
    def output(self, name: str) -> torch.Tensor: ...
    def role_inputs(self, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...
    def reference(self, name: str, keep: torch.Tensor | None, fit: Fit) -> torch.Tensor: ...
    def masked_error(self, combo: str) -> float: ...


class Probe(Protocol):
    """One property checked on a bound target.

    ``order`` places its checks among the other probes' (a probe that defers to another's codes
    comes after it); ``plan_order``, when set, plans it at another place than it is judged (the
    probes draw from one generator, so this order fixes every input); ``codes`` are the catalogue
    codes its findings may carry.
    """

    name: str
    codes: tuple[str, ...]
    order: int
    plan_order: int | None

    def wanted(self, binding: Binding) -> bool: ...
    def plan(self, planner: Planner) -> None: ...
    def judge(self, view: JudgeView) -> list[Outcome]: ...


@dataclass(frozen=True)
class FunctionProbe:
    """A :class:`Probe` made of a module's functions: what most probe modules export as ``PROBE``."""

    name: str
    codes: tuple[str, ...]
    order: int
    wanted: Callable[[Binding], bool]
    plan: Callable[[Planner], None]
    judge: Callable[[JudgeView], list[Outcome]]
    plan_order: int | None = None


def every_target(binding: Binding) -> bool:
    """``wanted`` of a probe planned for every bound target."""
    return True


def plans_nothing(planner: Planner) -> None:
    """``plan`` of a probe that judges runs planned for every target (the plain run) or the child's facts."""


def outcome(name: str, held: bool, detail: str, code: str, message: str) -> Outcome:
    """Check ``name`` passed when the property ``held``, else failed with the finding ``code``."""
    if held:
        return Check(name, "passed", detail), None, ""
    return Check(name, "failed", detail), code, message


def as_list(outcome: Outcome | None) -> list[Outcome]:
    """A ``verdict`` that may be None (probe not planned) as ``judge``'s list."""
    return [] if outcome is None else [outcome]
