"""Runs inside the child: build each target, run the parent's experiments, report raw results.

This is the only dynamic code that touches the user's objects. It decides
nothing: it constructs a target with the first candidate binding that
constructs and forwards, runs every planned experiment (catching each
failure separately), and yields facts plus tensors (widened to float64) for the
parent to judge. One reply per target, so a crash in one target keeps the others.

Request layout (built by ``probes.judge.plan``; each experiment is ``harness.protocol.Experiment``)::

    {"seed": 0, "device": "auto", "targets": [{
        "id": "0", "name": "Attention", "is_class": True,
        "candidates": [InitCandidate.to_request()...], "forward": ForwardPlan.to_request(),
        "experiments": [{"name", "instance": "exact" | "dropout", "mode": "eval" | "train",
                         "inputs": {role: tensor name}, "mask": tensor name | None,
                         "record": bool, "cotangent": tensor name | None,
                         "keywords": {param: tensor name}, "constants": {param: JSON value}}...]}]}
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import sys
import time
import tokenize
import traceback
import types
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from attncheck.dynamic.binding.bind import PACKAGE_CONFIG, all_sizes, config_value
from attncheck.dynamic.harness import sent_weights, unshared
from attncheck.dynamic.harness.protocol import Experiment
from attncheck.dynamic.inside import kv_cache, kv_perturb, model_mask, variant_facts, variant_runs
from attncheck.dynamic.inside.recorder import Recorder, is_projection

Tensors = dict[str, torch.Tensor]
DROPOUT_RATE = 0.5


def run(module: types.ModuleType, request: dict, tensors: Tensors) -> Iterator[tuple[dict, Tensors]]:
    """Yield ``(facts, tensors)`` for each target of the request, in order."""
    # The tensors are tiny: one intra-op thread avoids thread-pool wake-ups that cost more than the maths.
    torch.set_num_threads(1)
    device = _device(request.get("device", "auto"))
    inputs = {name: t.to(device) for name, t in tensors.items()}
    for unit in request["targets"]:
        wall, cpu = time.perf_counter(), time.process_time()
        # Variants free to fail (``independent``) run on the CPU: on a GPU, a variant's out-of-range
        # index is a device-side assert that leaves CUDA unusable for every later call of the process.
        unit_device, unit_inputs = (torch.device("cpu"), tensors) if unit.get("independent") else (device, inputs)
        with _default_dtype(torch.float32), _full_float32():
            facts, out = _run_target(module, unit, unit_inputs, unit_device, int(request.get("seed", 0)))
        # For bench/dynamic.py: where a check's time goes. process_cpu_s includes the child's start-up.
        facts["timing"] = {
            "experiments_s": time.perf_counter() - wall,
            "cpu_s": time.process_time() - cpu,
            "process_cpu_s": time.process_time() + unshared.cpu_before_split,
        }
        yield facts, out


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """User code runs in float32, as in its author's own test (``probes.precision``), even where its
    import set another default: its Python-scalar tensors (``torch.zeros(...)``) are float32 too."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


@contextlib.contextmanager
def _full_float32() -> Iterator[None]:
    """float32 products in full float32 on a GPU too: cuDNN's default TF32 convolutions (a 1x1 Conv1d
    projection) keep 10 bits of mantissa, an error of ~1e-3 that the 1e-5 tolerance would call a mismatch
    on the GPU alone; the verdict must not depend on the device."""
    flags = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


def _eager() -> contextlib.AbstractContextManager[Any]:
    """``force_eager`` where the user's code has loaded Dynamo (``torch.compile``, flex_attention): the
    same maths without compiling for tens of seconds a shape (compiled flex also refuses float64 on the
    CPU, which the low-precision and judging paths may use). Only there: importing Dynamo to set the
    stance costs seconds a child."""
    if "torch._dynamo" not in sys.modules:
        return contextlib.nullcontext()
    return torch.compiler.set_stance("force_eager")


def _device(wanted: str) -> torch.device:
    if wanted in ("cuda", "auto") and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def error_facts(exc: BaseException, module_file: str | None) -> dict[str, Any]:
    """Type, message and the innermost line of the user's file in the traceback."""
    line = function = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if module_file and frame.filename == module_file:
            line, function = frame.lineno, frame.name
    return {"type": type(exc).__name__, "message": error_message(exc)[:500], "line": line, "function": function}


def error_message(exc: BaseException) -> str:
    """The first line of the exception's message, and the next one where the first only introduces it
    (torch.compile's ``backend='inductor' raised:``, whose cause, the line that says why, follows)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return ""
    return f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


class _Target:
    """One target being exercised: its instances and how to call them."""

    def __init__(self, module: types.ModuleType, unit: dict, tensors: Tensors, device: torch.device, seed: int):
        if (unit.get("forward") or {}).get("image") == "bchw":
            tensors = {name: _channels_major(t) for name, t in tensors.items()}
        self.module, self.unit, self.tensors, self.device, self.seed = module, unit, tensors, device, seed
        self.obj = getattr(module, unit["name"])
        self.file = getattr(module, "__file__", None)
        self.instances: dict[str, Any] = {}
        self.candidate: dict | None = None
        self.neutral: list | None = None  # the (shape, convention) of the all-keep mask a required mask gets
        self.dropout_calls = 0
        self.no_grad: str | None = None  # why the forwards run without gradients (flex_attention on CPU)
        self.config: Any = None  # the config object the module was built from, for its rotary class
        self.rotary: nn.Module | None = None  # the file's rotary class built from that config (``rotary:<class>``)
        self.fitted: dict[str, Any] = {}  # arguments every instance gets (``variant_runs.window_for_length``)
        self.sent: dict[str, list[int]] = {}  # parameter -> shape, of every parameter loaded with sent values
        # id(parameter) -> (it, the values sent into it): held, so that no other parameter takes its id
        self.given: dict[int, tuple[nn.Parameter, torch.Tensor]] = {}

    def construct(self, candidate: dict, rate: float, overrides: dict[str, Any] | None = None) -> nn.Module:
        """Build with the seed; ``overrides`` set constructor arguments and config fields of those names."""
        overrides = {**self.fitted, **(overrides or {})}
        kwargs = dict(candidate["kwargs"])
        for name in candidate["dropout_names"]:
            kwargs[name] = rate
        config = candidate["config"]
        self.config = _build_config(self.module, config["class"], rate, config.get("reads", ())) if config else None
        if self.config is not None:
            for name, value in overrides.items():
                if hasattr(self.config, name):
                    setattr(self.config, name, value)
            kwargs[candidate["config"]["param"]] = self.config
        kwargs.update({n: v for n, v in overrides.items() if n in kwargs or n in _parameter_names(self.obj)})
        torch.manual_seed(self.seed)
        instance = self.obj(*candidate["args"], **kwargs)
        if not isinstance(instance, nn.Module):
            raise TypeError(f"{self.unit['name']}(...) is not a torch.nn.Module")
        if self.config is not None:
            _model_init(self.module, self.config, instance)
        built = instance.to(self.device).eval()  # float32, as built (``probes.precision``)
        self._load_sent(built)
        return built

    def _load_sent(self, instance: nn.Module) -> None:
        """The parent's weights (``harness.sent_weights``) into every projection and every randomly
        initialised matrix, before any forward; parameters set to one value keep it."""
        with torch.no_grad():
            for name, parameter in _sent_parameters(instance):
                shape = list(parameter.shape)
                key = name if self.sent.get(name, shape) == shape else f"{name}@{'x'.join(map(str, shape))}"
                drawn = sent_weights.values(self.seed, key, shape)
                parameter.copy_(torch.from_numpy(drawn).to(parameter.device, parameter.dtype))
                self.sent[key] = shape
                self.given[id(parameter)] = (parameter, parameter.detach().clone())

    def parameters_before(self, instance: Any) -> dict[str, torch.Tensor]:
        """What every parameter must still hold after a call: the values sent into it, else a copy
        taken now (a change between two calls is caught as well as one during a call)."""
        expected = _parameters(instance)
        if isinstance(instance, nn.Module):
            for name, parameter in instance.named_parameters():
                given = self.given.get(id(parameter), (None, None))[1]
                same_kind = given is not None and (given.dtype, given.shape) == (parameter.dtype, parameter.shape)
                if same_kind and name in expected:  # not after a cast to a low precision
                    expected[name] = given
        return expected

    def rebuilt(self, overrides: dict[str, Any]) -> nn.Module:
        """Another exact instance (same seed, same weights) with ``overrides`` set (``variant_runs``)."""
        assert self.candidate is not None
        return self.construct(self.candidate, 0.0, overrides)

    def instance(self, kind: str) -> Any:
        if not self.unit["is_class"]:
            return self.obj
        if kind not in self.instances:
            assert self.candidate is not None
            if kind in LOW_PRECISION:  # same seed, same weights as "exact", rounded to the dtype
                self.instances[kind] = _cast(self.construct(self.candidate, 0.0), LOW_PRECISION[kind])
                return self.instances[kind]
            made = self.construct(self.candidate, DROPOUT_RATE)
            for sub in made.modules():
                if isinstance(sub, nn.modules.dropout._DropoutNd):
                    # A nested module built with its own default p=0 (BERT's SelfAttention) still gets 0.5.
                    sub.p = DROPOUT_RATE
                    sub.register_forward_hook(self._count_dropout)
            self.instances[kind] = made
        return self.instances[kind]

    def _count_dropout(self, *_: Any) -> None:
        self.dropout_calls += 1

    def call(self, instance: Any, experiment: Experiment, extra: dict[str, Any] | None = None) -> Any:
        plan = self.unit["forward"]
        dtype = LOW_PRECISION.get(experiment.dtype or "")
        args = [_lowered(self.tensors[experiment.inputs[role]], dtype) for _, role in plan["roles"]]
        if plan.get("rank") == 3:  # a function on (batch, seq, dim): the one head of (batch, 1, seq, dim)
            args = [arg.squeeze(1) for arg in args]
        elif plan.get("rank") == 4:  # two batch axes before the tokens: one group, (batch, 1, seq, dim)
            args = [arg.unsqueeze(1) for arg in args]
        if plan.get("image"):
            args = [_as_map(arg, plan["image"]) for arg in args]
        kwargs = dict(plan["extra"])
        kwargs.update({k: _lowered(self.tensors[v], dtype) for k, v in experiment.keywords.items()})
        kwargs.update(experiment.constants)  # plain JSON values: an integer position offset
        mask = experiment.mask
        if plan["mask_name"] and mask is not None:
            kwargs[plan["mask_name"]] = self.as_accepted(_lowered(self.tensors[mask], dtype), args[0])
        elif plan["mask_name"] and plan["mask_required"]:
            kwargs[plan["mask_name"]] = self.neutral_mask(args)
        if plan.get("caller_mask"):
            key = args[1] if len(args) > 1 else args[0]
            kwargs[plan["mask_name"]] = model_mask.combined(instance, kwargs.get(plan["mask_name"]), args[0], key)
        kwargs.update(self.generated(args, kwargs))
        kwargs.update(extra or {})
        if not isinstance(instance, nn.Module) and "training" in _parameter_names(instance):
            kwargs.setdefault("training", experiment.mode == "train")  # as a caller passes self.training
        if plan.get("sequence_first"):  # the (seq, batch, dim) its code states; _split_output turns it back
            args = [arg.permute(2, 0, 1, 3) if arg.ndim == 4 else arg.transpose(0, 1) for arg in args]
        if any(kind == "caller-module" for _, kind in plan.get("generated", [])):  # it comes first: all by name
            kwargs.update({name: arg for (name, _), arg in zip(plan["roles"], args, strict=True)})
            args = []
        return instance(*args, **kwargs)

    def generated(self, args: list[torch.Tensor], given: dict[str, Any]) -> dict[str, Any]:
        """Rotary inputs a forward requires, built for these inputs: positions 0..s-1, a start offset
        of 0, ``freqs_cis`` from the module's own helper for one head's width; a rotary pair for the
        positions an experiment ``given`` under its name (the RoPE shift probe), else 0..s-1."""
        query = args[0]
        b, s = query.shape[0], query.shape[-2]
        built: dict[str, Any] = {}
        for name, kind in self.unit["forward"].get("generated", []):
            if kind == "ids":
                built[name] = torch.arange(s, device=query.device).expand(b, s)
            elif kind == "offset":
                built[name] = 0
            elif kind.startswith("rotary:"):
                built[name] = self.rotary_pair(kind.removeprefix("rotary:"), query, given.get(name))
            elif kind == "caller-module":
                key = args[1] if len(args) > 1 else query
                built[name] = _CallerModule(query.shape[1] // key.shape[1], query.shape[-1])
            elif kind == "scale":
                built[name] = float(query.shape[-1]) ** -0.5
            elif kind == "zeros":  # a residual the layer adds to its output
                built[name] = torch.zeros_like(query)
            elif kind.startswith("alibi:"):  # BLOOM's (b·h, 1, s) bias, from its model's own helper
                heads = query.shape[-1] // self.unit["head_dim"]
                keep = torch.ones(b, s, dtype=torch.long, device=query.device)
                built[name] = getattr(self.module, kind.removeprefix("alibi:"))(keep, heads, query.dtype)
            else:
                built[name] = getattr(self.module, kind)(self.unit["head_dim"], s).to(query.device)
        return built

    def rotary_pair(self, class_name: str, hidden: torch.Tensor, positions: Any = None) -> Any:
        """(cos, sin) for ``positions`` (0..s-1 by default) from the file's rotary class, built from the
        module's config as the model builds it (``LlamaRotaryEmbedding(config)(x, position_ids)``)."""
        if self.rotary is None:
            self.rotary = getattr(self.module, class_name)(self.config).to(hidden.device)
        b, s = hidden.shape[0], hidden.shape[-2]
        if not isinstance(positions, torch.Tensor):
            positions = torch.arange(s, device=hidden.device)
        return self.rotary(hidden, positions.to(hidden.device).expand(b, s))

    def as_accepted(self, mask: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        """A bool mask as 1.0/0.0 where the module takes float 0/1 masks (documented so, or the
        all-keep mask it accepted was float ones)."""
        accepted_floats = self.neutral is not None and self.neutral[1] == "keep-float"
        floats = self.unit["forward"].get("mask_float") or accepted_floats
        return mask.to(query.dtype) if floats and mask.dtype == torch.bool else mask

    def neutral_mask(self, args: list[torch.Tensor]) -> torch.Tensor | None:
        """A mask that keeps every key, in the chosen shape and convention, sized for these inputs."""
        if self.neutral is None:
            return None
        shape, convention = self.neutral
        query, key = args[0], args[1] if len(args) > 1 else args[0]
        b, q, k = query.shape[0], query.shape[-2], key.shape[-2]
        size = {"b11k": (b, 1, 1, k), "bk": (b, k), "bqk": (b, q, k), "b1qk": (b, 1, q, k)}[shape]
        if convention in ("keep", "blocked"):
            return torch.full(size, convention == "keep", dtype=torch.bool, device=query.device)
        return torch.full(size, 1.0 if convention == "keep-float" else 0.0, dtype=query.dtype, device=query.device)

    def kv_cache(self, instance: nn.Module, experiment: Experiment) -> tuple[torch.Tensor, torch.Tensor]:
        """The (k, v) cache of the experiment's prefix, cut from a run of the module on it (``kv_cache``)."""
        spec = experiment.kv_cache or {}
        prefix = self.tensors[spec["prefix"]]
        with kv_cache.capture(instance, prefix, is_projection) as seen:
            self.call(instance, Experiment(f"{experiment.name}/prefix", {"x": spec["prefix"]}))
        return kv_cache.cut(seen, spec["d_model"], spec["head_dim"])


def _sent_parameters(instance: nn.Module) -> Iterator[tuple[str, nn.Parameter]]:
    """The parameters that get the parent's weights: those of projection layers and of
    ``nn.MultiheadAttention`` itself, and any other matrix not set to one value."""
    projections = {
        f"{layer_name}.{name}" if layer_name else name
        for layer_name, layer in instance.named_modules()
        if is_projection(layer) or isinstance(layer, nn.MultiheadAttention)
        for name, _ in layer.named_parameters(recurse=False)
    }
    for name, parameter in instance.named_parameters():
        if not parameter.is_floating_point() or nn.parameter.is_lazy(parameter) or parameter.numel() == 0:
            continue
        flat = parameter.detach().reshape(-1)
        if name in projections or (parameter.ndim >= 2 and not bool((flat == flat[0]).all())):
            yield name, parameter


class _CallerModule(nn.Module):
    """The layer an attention function is handed by its caller: in eval mode, with the query heads per
    KV head of this call's inputs (what transformers' ``repeat_kv(key, module.num_key_value_groups)`` reads)
    and their head width (Gemma 2's default ``scaling = module.head_dim**-0.5``)."""

    def __init__(self, groups: int, head_dim: int):
        super().__init__()
        self.num_key_value_groups = max(1, groups)
        self.head_dim = head_dim
        self.is_causal = False
        self.eval()


LOW_PRECISION = {"float16": torch.float16, "bfloat16": torch.bfloat16}
# Errors of a backward whose forward can still be judged, run without gradients: the error's
# words, why the run goes without them, and whether the error is the user's (kept for the parent).
_NO_BACKWARD = (
    # flex_attention checks the tensors' requires_grad flag, not the grad mode: run without either
    ("FlexAttention does not support backward",
     "the forward calls flex_attention, which has no backward on CPU: run without gradients", False),
    # the forward changed in place a tensor its backward needs (``attn /= s`` on the softmax's
    # output): the module cannot be trained, whatever its input
    ("needed for gradient computation has been modified by an inplace operation",
     "its backward raises (a tensor autograd needs was changed in place): run without gradients", True),
)


def _lowered(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """Floating inputs in the experiment's low precision, an additive mask's fill kept finite in it;
    bool masks and positions unchanged."""
    if dtype is None or not tensor.is_floating_point():
        return tensor
    return tensor.clamp(min=model_mask.fill(dtype)).to(dtype)


def _cast(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    """Real floating parameters and buffers to ``dtype``; complex ones (Meta's freqs_cis) stay complex."""
    return module._apply(lambda t: t.to(dtype) if t.is_floating_point() else t)


def _parameter_names(callable_: Any) -> set[str]:
    """A class's constructor's or a function's parameter names (none when its signature cannot be read)."""
    try:
        return set(inspect.signature(callable_).parameters)
    except (TypeError, ValueError):
        return set()


def _model_init(module: types.ModuleType, config: Any, instance: nn.Module) -> None:
    """Initialise the module's own parameters as its model does (transformers' ``_init_weights`` of the
    file's pretrained-model class): a layer alone keeps what ``torch.empty`` left there (gpt-oss's
    ``sinks``), memory that differs from run to run. Children keep the seeded initialisation."""
    for value in vars(module).values():
        init = getattr(value, "_init_weights", None)
        if not (isinstance(value, type) and issubclass(value, nn.Module) and init is not None):
            continue
        if value.__module__ != module.__name__:
            continue
        try:
            model = value.__new__(value)
            nn.Module.__init__(model)
            model.config = config
            with torch.no_grad():
                init(model, instance)
        except Exception:  # not a model class that initialises from its config: the layer's own init stays
            continue
        return


def _package_config(module: types.ModuleType, reads: Sequence[str] = ()) -> type | None:
    """The ``*Config`` class the module takes from its own package: the one there is, or of several
    (SAM 2's vision, prompt-encoder and mask-decoder configs) the one that has every field the
    class reads (``config.attention_downsample_rate``)."""
    package = (module.__name__.rpartition(".")[0] or module.__name__) + "."
    found = {
        value
        for name, value in vars(module).items()
        if name.endswith("Config") and isinstance(value, type) and value.__module__.startswith(package)
    }
    if len(found) > 1 and reads:
        found = {cls for cls in found if set(reads) <= set(_fields(cls))}
    return found.pop() if len(found) == 1 else None


def _fields(cls: type) -> list[str]:
    """The fields a config class takes: a dataclass's, and its constructor's named parameters (a class
    with its own ``__init__`` under a dataclass base: ChatGLM's config under transformers 5's
    ``PretrainedConfig`` takes ``hidden_size``, ``kv_channels``... that are no dataclass field)."""
    named = [p for p in inspect.signature(cls).parameters if p not in ("self", "args", "kwargs")]
    if not dataclasses.is_dataclass(cls):
        return named
    fields = [f.name for f in dataclasses.fields(cls) if f.init]
    return fields + [name for name in named if name not in fields]


def _build_config(module: types.ModuleType, class_name: str | None, rate: float, reads: Sequence[str] = ()) -> Any:
    """The module's own config class filled with small sizes, or a namespace of every known size."""
    cls = _package_config(module, reads) if class_name == PACKAGE_CONFIG else getattr(module, class_name or "", None)
    if cls is None:
        return types.SimpleNamespace(**all_sizes(rate))
    names = _fields(cls)
    values = {name: config_value(name, rate) for name in names}
    config = cls(**{name: value for name, value in values.items() if value is not None})
    for name, value in values.items():  # fields a plain __init__ might not store
        if value is not None and not hasattr(config, name):
            setattr(config, name, value)
    if hasattr(config, "_attn_implementation"):  # transformers: the readable eager path, not a fused kernel
        config._attn_implementation = "eager"
    for nested in vars(config).values():  # MPT's attn_config.attn_pdrop: the dropout probe's rate reaches it
        if type(nested).__name__.endswith("Config") and hasattr(nested, "__dict__"):
            for name, value in vars(nested).items():
                number = isinstance(value, (int, float)) and not isinstance(value, bool)
                if number and isinstance(config_value(name, rate), float):
                    object.__setattr__(nested, name, rate)  # past a strict ``attn_pdrop: int`` annotation
    return config


def _run_target(
    module: types.ModuleType, unit: dict, tensors: Tensors, device: torch.device, seed: int
) -> tuple[dict, Tensors]:
    facts: dict[str, Any] = {
        "unit": unit["id"],
        "target": unit["name"],
        "device": device.type,
        "experiments": {},
        "attempts": [],
    }
    out: Tensors = {}
    target = _Target(module, unit, tensors, device, seed)
    experiments = [Experiment.from_request(e) for e in unit["experiments"]]
    if unit.get("independent"):  # variants of one call (e.g. cos/sin layouts): each may fail alone
        for experiment in experiments:
            _run_experiment(target, experiment, facts, out)
        facts["binding"] = "function"
        return facts, out
    if not _choose_binding(target, experiments[0], facts, out):
        return facts, out
    for experiment in experiments[1:]:
        _run_experiment(target, experiment, facts, out)
    instance = target.instance("exact")
    if _compiled(vars(module)) or (isinstance(instance, nn.Module) and _compiled(vars(instance))):
        facts["binding"] = f"{facts['binding']}; {EAGER}"
    facts["docs"] = _docs(target.obj)
    facts["comments"] = _comments(target.obj)
    if unit["is_class"]:
        facts["causal_buffer"] = _has_causal_buffer(instance)
        facts["attrs"] = {k: v for k, v in vars(instance).items() if isinstance(v, int) and not isinstance(v, bool)}
        facts["flags"] = {k: v for k, v in vars(instance).items() if isinstance(v, bool)}
        facts["declared"] = variant_facts.declarations(instance, out)
        facts["dropout"] = {
            "configured": bool(target.candidate and (target.candidate["dropout_names"] or target.candidate["config"])),
            "modules": sum(isinstance(m, nn.modules.dropout._DropoutNd) for m in instance.modules()),
            "calls": target.dropout_calls,
        }
        facts[sent_weights.SENT] = target.sent
    return facts, out


def _choose_binding(target: _Target, first: Experiment, facts: dict, out: Tensors) -> bool:
    """Try each candidate (and, for a required mask, each all-keep mask) on the first experiment;
    keep the first that constructs and forwards, with an output that is no fully masked one."""
    candidates = target.unit["candidates"] if target.unit["is_class"] else [None]
    neutral = target.unit["forward"].get("neutral") or [None]
    for candidate in candidates:
        label = candidate["label"] if candidate else "function"
        try:
            if candidate is not None:
                target.candidate, target.fitted = candidate, {}
                target.instances = {"exact": target.construct(candidate, 0.0)}
                length = target.tensors[next(iter(first.inputs.values()))].shape[-2]
                target.fitted = variant_runs.window_for_length(target.instances["exact"], length, target.rebuilt)
                if target.fitted:
                    target.instances = {"exact": target.construct(candidate, 0.0)}
        except Exception as exc:  # any failure of user code is a fact, never a crash of the child
            facts["attempts"].append({"label": label, "stage": "construct", "error": error_facts(exc, target.file)})
            continue
        for spec in neutral:
            target.neutral = spec
            tried = label if spec is None else f"{label}, all-keep mask {spec[1]} {spec[0]}"
            ran = _run_experiment(target, first, facts, out)
            if ran and (spec is None or _informative(out[f"{first.name}/out"])):
                fitted = "".join(f", {name}={value}" for name, value in target.fitted.items())
                note = " (its relative-position window spans the input)" if fitted else ""
                facts["binding"] = label + fitted + note
                facts["neutral_mask"] = spec
                return True
            error = facts["experiments"][first.name].get("error") or _MASKED_EVERYTHING
            facts["attempts"].append({"label": tried, "stage": "forward", "error": error})
    facts["binding"] = None
    return False


_MASKED_EVERYTHING = {"type": "", "message": "the output is the same for every query (every key masked)", "line": None}


def _cotangent_like(output: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
    """The parent's gradient direction fitted to an output with another number of positions:
    attention pooling returns fewer (or one, its axis squeezed), a Perceiver's latents may be
    more than the tokens (the direction's rows repeated)."""
    if output.ndim == direction.ndim - 1:
        return direction[:, 0]  # pooled to one position, its axis squeezed: (b, d)
    if output.ndim != direction.ndim or output.shape[-2] == direction.shape[-2]:
        return direction
    repeats = -(-output.shape[-2] // direction.shape[-2])
    tiled = direction.repeat(*([1] * (direction.ndim - 2)), repeats, 1) if repeats > 1 else direction
    return tiled[..., : output.shape[-2], :]


def _informative(output: torch.Tensor) -> bool:
    """Finite and different across queries: the all-keep mask did not mask every key."""
    if output.ndim < 2 or not bool(output.isfinite().all()):
        return False
    return float((output - output.mean(dim=-2, keepdim=True)).abs().max()) > 1e-9


def _run_experiment(target: _Target, experiment: Experiment, facts: dict, out: Tensors) -> bool:
    name = experiment.name
    cotangent = experiment.cotangent
    recorder = None
    perturbing: list[Any] = []
    failure: Exception | None = None
    declared = None
    try:
        instance = target.instance(experiment.instance)
        if experiment.variant and isinstance(instance, nn.Module):
            length = target.tensors[next(iter(experiment.inputs.values()))].shape[-2]
            instance, declared = variant_runs.prepare(instance, experiment.variant, length, target.rebuilt)
        if experiment.record:
            recorder = Recorder(instance, target.tensors, experiment.inputs, target.unit.get("pre_norm", ""))
        if experiment.perturb_kv and isinstance(instance, nn.Module):
            perturbing = kv_perturb.install(instance, experiment.perturb_kv, is_projection)
        if isinstance(instance, nn.Module):
            instance.train(experiment.mode == "train")
            instance.zero_grad(set_to_none=True)
            if target.no_grad:
                instance.requires_grad_(False)
        with torch.set_grad_enabled(cotangent is not None and not target.no_grad), _eager():
            extra = {}
            if experiment.kv_cache and isinstance(instance, nn.Module):
                cache = target.kv_cache(instance, experiment)
                extra[experiment.kv_cache["param"]] = cache
                out[f"{name}/cache_k"], out[f"{name}/cache_v"] = (t.to("cpu", torch.float64).clone() for t in cache)
            before = target.parameters_before(instance)
            result = target.call(instance, experiment, extra)
            _check_unchanged(instance, before)
            output, weights = _split_output(result, target, experiment)
            if cotangent is not None and isinstance(instance, nn.Module):
                if output.requires_grad:  # else no parameter reaches the output: every grad stays None
                    (output * _cotangent_like(output, target.tensors[cotangent])).sum().backward()
                facts["grads"] = {
                    n: (None if p.grad is None else float(p.grad.norm()))
                    for n, p in instance.named_parameters()
                    if p.requires_grad
                }
    except Exception as exc:
        failure = exc
    finally:
        for handle in perturbing:
            handle.remove()
        if recorder is not None:
            recorder.close()
            facts["softmax"] = recorder.softmax
    if failure is not None:
        found = next((entry for entry in _NO_BACKWARD if entry[0] in str(failure)), None)
        if target.no_grad is None and found is not None:
            _, target.no_grad, users = found
            facts["no_grad"] = target.no_grad
            if users:  # the parent reports it
                facts["backward_error"] = error_facts(failure, target.file)
            return _run_experiment(target, experiment, facts, out)
        facts["experiments"][name] = {"ok": False, "error": error_facts(failure, target.file)}
        return False
    facts["experiments"][name] = {"ok": True, "shape": list(output.shape), "weights": weights is not None}
    if declared is not None:  # what the instance that ran declares (a window set smaller)
        facts["experiments"][name]["declared"] = declared
    out[f"{name}/out"] = output.detach().to("cpu", torch.float64)
    if experiment.all_outputs:  # a rotary function's second tensor (its rotated k)
        for index, item in enumerate(_tensors(result)[1:], 1):
            out[f"{name}/out{index}"] = item.detach().to("cpu", torch.float64)
    if weights is not None:
        out[f"{name}/weights"] = weights.detach().to("cpu", torch.float64)
    if recorder is not None:
        facts["layers"] = recorder.report(out)
    return True


def _split_output(result: Any, target: _Target, experiment: Experiment) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The output tensor and, when returned alongside, the attention weights."""
    items = _items(result)
    if not items or not isinstance(items[0], torch.Tensor):
        raise TypeError(f"forward returned {type(result).__name__}, not a tensor or a tuple starting with one")
    if target.unit["forward"].get("sequence_first"):
        items[0] = _batch_first(items[0], target.tensors[next(iter(experiment.inputs.values()))])
    if target.unit["forward"].get("rank") == 3:  # back to the (batch, 1, seq, dim) the parent planned
        items = [t.unsqueeze(1) if isinstance(t, torch.Tensor) and t.ndim == 3 else t for t in items]
    elif target.unit["forward"].get("rank") == 4 and items[0].ndim == 4:  # the one group's (batch, seq, dim)
        items[0] = items[0].squeeze(1)
    if target.unit["forward"].get("image") and items[0].ndim == 4:
        items[0] = _as_sequence(items[0], target.unit["forward"]["image"])
    roles = dict(experiment.inputs)
    query = target.tensors[roles.get("query", roles.get("x"))]
    key = target.tensors[roles.get("key", roles.get("kv", roles.get("x")))]
    q_len, k_len = query.shape[-2], key.shape[-2]
    items[0] = _heads_first(items[0], query) if not target.unit["is_class"] else items[0]
    weights = next(
        (
            t
            for t in items[1:]
            if isinstance(t, torch.Tensor) and t.ndim in (3, 4) and tuple(t.shape[-2:]) == (q_len, k_len)
            and _probabilities(t)
        ),
        None,
    )
    return items[0], weights


def _as_map(sequence: torch.Tensor, layout: str) -> torch.Tensor:
    """A (batch, seq, dim) input as the 1 x seq feature map a class on images takes."""
    return sequence.transpose(1, 2).unsqueeze(2) if layout == "bchw" else sequence.unsqueeze(1)


def _channels_major(tensor: torch.Tensor) -> torch.Tensor:
    """A (batch, seq, dim) tensor stored channel by channel, so that its (batch, dim, 1, seq) map is
    contiguous, as a real feature map is, and still shares its storage (the recorder knows inputs by it):
    torch 2.13's CPU GroupNorm backward crashes with SIGSEGV on the transposed view of a token-major one."""
    return tensor.transpose(1, 2).contiguous().transpose(1, 2) if tensor.ndim == 3 else tensor


def _as_sequence(feature_map: torch.Tensor, layout: str) -> torch.Tensor:
    """The output map read back as the (batch, seq, dim) sequence of its positions, row by row."""
    return feature_map.flatten(2).transpose(1, 2) if layout == "bchw" else feature_map.flatten(1, 2)


def _batch_first(output: torch.Tensor, planned: torch.Tensor) -> torch.Tensor:
    """A sequence-first module's output in the layout the parent planned its ``planned`` input in:
    (seq, batch, dim) back to (batch, seq, dim); for per-head (batch, heads, seq, head_dim) inputs,
    (seq, batch, heads, head_dim) or its merged (seq, batch, heads * head_dim) back to per-head."""
    if output.ndim == 3 and planned.ndim == 4:  # ChatGLM's core merges its heads: (s, b, h * dh)
        output = output.unflatten(-1, (planned.shape[1], -1))
    if output.ndim == 4 and planned.ndim == 4:
        return output.permute(1, 2, 0, 3)
    return output.transpose(0, 1) if output.ndim == 3 else output


def _heads_first(output: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """A function's (batch, seq, heads, dim) output as (batch, heads, seq, dim): transformers' attention
    functions and flash-attn hand the caller its merge layout (``attn_output.transpose(1, 2)``)."""
    b, h, s = query.shape[:3]
    if output.ndim == 4 and query.ndim == 4 and h != s and tuple(output.shape[:3]) == (b, s, h):
        return output.transpose(1, 2)
    return output


def _probabilities(tensor: torch.Tensor) -> bool:
    """Values in [0, 1], not all zero: attention weights, not a (q, k) score bias returned beside them
    (T5's ``position_bias``, zeros or a large negative mask)."""
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return False
    return bool(tensor.min() >= 0) and bool(tensor.max() <= 1 + 1e-6) and bool(tensor.max() > 0)


def _items(result: Any) -> list[Any]:
    """What a forward returned, as a list (a dict's values, a tuple's items, or the one value)."""
    if isinstance(result, dict):
        return list(result.values())
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _tensors(result: Any) -> list[torch.Tensor]:
    """The floating tensors among what a forward returned, in order."""
    return [t for t in _items(result) if isinstance(t, torch.Tensor) and t.is_floating_point()]


EAGER = (
    "its torch.compile'd callables run eagerly, the same maths in float64 (compiled flex_attention takes "
    "no float64 on CPU, and compiling costs tens of seconds a shape; compile = true in [tool.attncheck] "
    "also runs the compiled path once, in float32)"
)


def _compiled(namespace: dict[str, Any]) -> bool:
    """The file or the module holds a compiled callable (``flex_attention = torch.compile(flex_attention)``):
    every forward runs under ``force_eager``, so the report says the compiled path was not taken."""
    return any(hasattr(value, "_torchdynamo_orig_callable") for value in namespace.values())


def _docs(obj: Any) -> str:
    """The target's own docstrings, its class's then its forward's: not ``nn.Module``'s, which
    ``inspect.getdoc`` inherits and which would crowd a forward's ``mask:`` line out of the reply."""
    parts = [_own_doc(obj), _own_doc(getattr(obj, "forward", None))]
    return "\n".join(p for p in parts if p)[:4000]


def _own_doc(obj: Any) -> str:
    doc = getattr(obj, "__doc__", None) if obj is not None else None
    return inspect.cleandoc(doc) if isinstance(doc, str) else ""


def _comments(obj: Any) -> str:
    """The ``#`` comments of a target's code (a class's methods), where a mask convention is often
    stated ("# True = masked"): the mask probes expect the convention stated there."""
    functions = [m for m in vars(obj).values() if inspect.isfunction(m)] if isinstance(obj, type) else [obj]
    return "\n".join(filter(None, map(_function_comments, functions)))[:4000]


def _function_comments(function: Any) -> str:
    try:
        lines = inspect.getsource(function).splitlines(keepends=True)
        tokens = tokenize.generate_tokens(iter(lines).__next__)
        return "\n".join(token.string.lstrip("# ") for token in tokens if token.type == tokenize.COMMENT)
    except (OSError, TypeError, tokenize.TokenError, IndentationError, SyntaxError):
        return ""


def _has_causal_buffer(instance: nn.Module) -> bool:
    """A square 0/1 triangular buffer: the usual sign of a causal module."""
    for buffer in instance.buffers():
        if buffer.ndim < 2 or buffer.shape[-1] != buffer.shape[-2] or buffer.shape[-1] < 2:
            continue
        square = buffer.reshape(-1, *buffer.shape[-2:])[0]
        if not bool(((square == 0) | (square == 1)).all()):
            continue
        lower, upper = torch.equal(square, square.tril()), torch.equal(square, square.triu())
        if lower != upper:
            return True
    return False


class ParametersChangedError(Exception):
    """The forward wrote into its own parameters: what it computed was not with the weights it had."""


def _parameters(instance: Any) -> dict[str, torch.Tensor]:
    """A copy of every parameter, taken before a call (the weights judged are the ones it had)."""
    if not isinstance(instance, nn.Module):
        return {}
    return {
        name: parameter.detach().clone()
        for name, parameter in instance.named_parameters()
        if not nn.parameter.is_lazy(parameter)  # materialised by the first call: nothing to compare
    }


def _check_unchanged(instance: Any, before: dict[str, torch.Tensor]) -> None:
    """Raise when a call changed a parameter in place: a module that rescales its weights as it runs
    would otherwise be judged against the weights it left behind, which its output may well match."""
    if not before:
        return
    after = dict(instance.named_parameters())
    changed = [name for name, old in before.items() if name not in after or not torch.equal(after[name], old)]
    if changed:
        raise ParametersChangedError(
            f"forward changed its own parameters in place ({', '.join(changed[:3])}): "
            "attention must not write into its weights"
        )
