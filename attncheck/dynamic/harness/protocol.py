"""What crosses the process boundary, typed on both sides: experiments going in, facts coming back.

The parent plans ``Experiment`` objects (``probes.judge.plan``, ``probes.rope_functions.plan`` and
the probes), the request carries them as plain JSON (``to_request``), and the child reads them back
(``from_request``) before it runs one. Every option is a field with its default, so neither side
tests for optional keys. Tensors travel by name: the values are in ``inputs.safetensors``.
The child's reply for each unit comes back as JSON facts (``ReplyFacts``), checked by
``reply_facts`` in the parent before anything judges them, and tensors (``tensors-NNNN.safetensors``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import UnionType
from typing import Any, NotRequired, TypedDict, Union, cast, get_args, get_origin, get_type_hints, is_typeddict


@dataclass(frozen=True)
class Experiment:
    """One call of a target: its inputs and how to make the instance and the call."""

    name: str
    inputs: dict[str, str]  # forward role -> tensor name
    mask: str | None = None  # tensor name of the mask argument
    instance: str = "exact"  # "exact", "dropout" or a low-precision dtype name: which instance runs
    mode: str = "eval"  # "eval" or "train"
    dtype: str | None = None  # "float16" / "bfloat16": inputs lowered to it
    record: bool = False  # record the projections and softmax calls (the plain run)
    cotangent: str | None = None  # tensor name: backpropagate output * cotangent for the gradients
    perturb_kv: dict[str, int] | None = None  # inside.kv_perturb's spec: kv_heads, head_dim, d_model, head
    kv_cache: dict[str, Any] | None = None  # inside.kv_cache's spec: param, prefix, d_model, head_dim
    keywords: dict[str, str] = field(default_factory=dict)  # forward parameter -> tensor name
    constants: dict[str, Any] = field(default_factory=dict)  # forward parameter -> JSON value
    all_outputs: bool = False  # keep every returned tensor, not only the first
    variant: str | None = None  # inside.variant_runs' term: run only when the module declares it

    def to_request(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "inputs": self.inputs,
            "mask": self.mask,
            "instance": self.instance,
            "mode": self.mode,
            "dtype": self.dtype,
            "record": self.record,
            "cotangent": self.cotangent,
            "perturb_kv": self.perturb_kv,
            "kv_cache": self.kv_cache,
            "keywords": self.keywords,
            "constants": self.constants,
            "all_outputs": self.all_outputs,
            "variant": self.variant,
        }

    @classmethod
    def from_request(cls, request: dict[str, Any]) -> Experiment:
        """Read back ``to_request``'s dict; a key it lacks takes the field's default."""
        return cls(**request)


# ---------------------------------------------------------------- what comes back
# The child's reply for one unit is JSON; these records say what each key holds. ``reply_facts``
# checks a reply against them in the parent, so a judge reads typed facts, never a malformed
# value from a hostile child (``channel`` has already bounded its size and cut its texts).


class ErrorFacts(TypedDict, total=False):
    """An exception raised by user code (``inside.child.error_facts``)."""

    type: str
    message: str
    line: int | None  # in the user's file
    traceback: str  # the frames' places, never their text
    missing_module: str


class RunFacts(TypedDict, total=False):
    """One experiment: it ran (with its output shape and whether weights came back) or raised."""

    ok: bool
    shape: list[int]
    weights: bool
    error: ErrorFacts


class AttemptFacts(TypedDict):
    """A binding candidate that failed to construct or forward."""

    label: str
    stage: str  # "construct" or "forward"
    error: ErrorFacts


# A projection the plain run applied (its weight, bias and columns-to-scores flags travel as tensors
# ``layer{i}/...``); "in" is a keyword, hence the functional form.
LayerFacts = TypedDict(
    "LayerFacts", {"name": str, "read": str, "out": int, "in": int, "bias": bool, "to_scores": NotRequired[bool]}
)


class SoftmaxCall(TypedDict):
    """A softmax the plain run took: its input shape and axis."""

    shape: list[int]
    dim: int


class DropoutFacts(TypedDict):
    """Whether the class takes dropout, how many dropout modules it holds, how often they ran."""

    configured: bool
    modules: int
    calls: int


class ReplyFacts(TypedDict, total=False):
    """One unit's reply: a target's run (``inside.executor``), or the import, load or entry unit."""

    unit: str
    target: str
    device: str
    binding: str | None  # the candidate that forwarded; None when none did
    neutral_mask: list[str] | None  # the all-keep mask a required mask parameter got: (shape, convention)
    experiments: dict[str, RunFacts]
    attempts: list[AttemptFacts]
    grads: dict[str, float | None]  # parameter -> gradient norm; None when it got none
    no_grad: str  # why the target ran without gradients
    backward_error: ErrorFacts  # the backward that made it run without them raised this
    softmax: list[SoftmaxCall]
    layers: list[LayerFacts]
    docs: str
    comments: str
    causal_buffer: bool
    attrs: dict[str, int]
    flags: dict[str, bool]
    declared: dict[str, Any]  # inside.variant_facts.declarations
    dropout: DropoutFacts
    sent: dict[str, list[int]]  # parameter -> shape, loaded with the parent's weights (``sent_weights``)
    timing: dict[str, float]
    error: ErrorFacts  # the import, load or entry unit failed
    how: str  # how the load unit imported the file


class ReplyError(ValueError):
    """A reply whose facts do not have the types of ``ReplyFacts``; its message is one line."""


def reply_facts(facts: dict[str, Any]) -> ReplyFacts:
    """``facts`` checked against ``ReplyFacts`` (keys it does not name pass through untouched)."""
    _check(facts, ReplyFacts, "reply")
    return cast(ReplyFacts, facts)


def _check(value: Any, expected: Any, where: str) -> None:
    """Raise ReplyError unless ``value`` is of the type ``expected`` (a TypedDict, a generic or a class)."""
    got = type(value).__name__
    if expected is Any:
        return
    if is_typeddict(expected):
        if not isinstance(value, dict):
            raise ReplyError(f"{where}: expected an object, got {got}")
        for key in sorted(expected.__required_keys__ - value.keys()):
            raise ReplyError(f"{where}: lacks {key!r}")
        for key, hint in get_type_hints(expected).items():
            if key in value:
                _check(value[key], hint, f"{where}.{key}")
        return
    origin, arguments = get_origin(expected), get_args(expected)
    if origin in (Union, UnionType):
        if not any(_fits(value, option) for option in arguments):
            raise ReplyError(f"{where}: expected {expected}, got {got}")
    elif origin is list:
        if not isinstance(value, list):
            raise ReplyError(f"{where}: expected a list, got {got}")
        for index, item in enumerate(value):
            _check(item, arguments[0], f"{where}[{index}]")
    elif origin is dict:
        if not isinstance(value, dict):
            raise ReplyError(f"{where}: expected an object, got {got}")
        for key, item in value.items():
            _check(item, arguments[1], f"{where}[{str(key)[:40]!r}]")
    elif not _scalar(value, expected):
        raise ReplyError(f"{where}: expected {expected.__name__}, got {got}")


def _fits(value: Any, expected: Any) -> bool:
    try:
        _check(value, expected, "")
    except ReplyError:
        return False
    return True


def _scalar(value: Any, expected: Any) -> bool:
    """JSON's scalars: an int is a float too, a bool is no int."""
    if expected is type(None):
        return value is None
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)
