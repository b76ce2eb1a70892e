"""Runs inside the child: which projection read which input, found by where parameters flow.

A projection is recorded wherever its weight is applied, not only as a module:

- ``nn.Linear``, 1x1 ``nn.Conv1d``/``nn.Conv2d`` and GPT-2's ``Conv1D`` layers, by forward hooks;
- a raw ``nn.Parameter`` used through ``F.linear`` (a packed ``in_proj_weight``), ``@`` /
  ``matmul`` (a weight laid out (in, out)) or a two-operand ``einsum`` that contracts the
  input's last axis with the weight;
- ``F.multi_head_attention_forward`` (``nn.MultiheadAttention`` and modules that call it with
  their own parameters): its packed or separate Q/K/V weights and its output projection, read
  from the call's arguments, because torch's own code runs out of sight of a function mode.

Each call records the weight in ``nn.Linear`` layout (out_features, in_features), its bias, and
what the call read: the query, key, value or single input of the experiment, another
projection's output, one of the module's own parameters (``param:<name>``: learned pooling
queries, sent back as ``declared/param/<name>``), or something else (the attention context). It
also records every softmax (input shape and dim), however spelled, and, at the first softmax or
SDPA call, which output columns of each projection reach the scores (``score_flow``: a fused
layer's q/k/v layout).
"""

from __future__ import annotations

import contextlib
import inspect
import re
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812
from torch.overrides import TorchFunctionMode

from attncheck.dynamic.inside.score_flow import columns_to_scores

Tensors = dict[str, torch.Tensor]

_SOFTMAX = {torch.softmax, F.softmax, torch.Tensor.softmax, torch.special.softmax}
_MATMUL = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__}
_MHA_SIGNATURE = inspect.signature(F.multi_head_attention_forward)
_COPIES = {torch.Tensor.repeat, torch.tile, torch.Tensor.tile, torch.Tensor.clone, torch.clone, torch.Tensor.contiguous,
           torch.Tensor.repeat_interleave, torch.repeat_interleave}
"""Calls whose result is a copy of their first argument's values, laid out again: learned queries copied
per batch (``self.latents.repeat(b, 1, 1)``) are still that parameter when a projection reads them."""


def is_projection(layer: nn.Module) -> bool:
    """A layer whose forward is one projection: Linear, a 1x1 Conv1d or Conv2d (over a feature map's
    channels), GPT-2's Conv1D."""
    if isinstance(layer, nn.Linear):
        return True
    if isinstance(layer, (nn.Conv1d, nn.Conv2d)):
        return set(layer.kernel_size) == {1} and set(layer.stride) == {1} and layer.groups == 1
    weight = getattr(layer, "weight", None)
    # GPT-2's Conv1D: a 2-D (in, out) weight and ``nf`` (out features); ``nx`` is not always stored.
    return isinstance(weight, torch.Tensor) and weight.ndim == 2 and getattr(layer, "nf", None) == weight.shape[1]


def linear_weight(layer: nn.Module) -> torch.Tensor:
    """A projection layer's weight in ``nn.Linear`` layout (out_features, in_features)."""
    if isinstance(layer, nn.Linear):
        return layer.weight
    if isinstance(layer, (nn.Conv1d, nn.Conv2d)):
        return layer.weight.flatten(1)
    return layer.weight.T  # GPT-2 Conv1D stores (in, out)


def pointer(tensor: torch.Tensor) -> int:
    """The address of a tensor's storage: views of one tensor share it."""
    with contextlib.suppress(RuntimeError):
        return tensor.untyped_storage().data_ptr()
    return id(tensor)


class Recorder(TorchFunctionMode):
    """Records projections (by hooks and by parameter flow) and softmax calls during one experiment."""

    def __init__(self, instance: Any, tensors: Tensors, roles: dict[str, str], pre_norm: str = ""):
        """``pre_norm``: the layer a residual block applies to its input first (a VAE's GroupNorm), whose
        output the projections read as that input."""
        super().__init__()
        self.softmax: list[dict[str, Any]] = []
        self.calls: list[tuple[str, torch.Tensor, torch.Tensor | None, str]] = []  # name, weight, bias, read
        self.handles = []
        self.outputs: list[torch.Tensor] = []  # kept alive so storage pointers stay unique
        self.features: dict[int, torch.Tensor] = {}  # call index -> its output, features on the last axis
        self.to_scores: dict[int, torch.Tensor] | None = None  # call index -> columns that reach the scores
        self.pointers: dict[int, str] = {}
        self.parameters: dict[int, tuple[str, torch.Tensor]] = {}  # storage of a raw parameter -> it, named
        self.read_parameters: dict[str, torch.Tensor] = {}  # parameters a projection may read as its input
        for role, name in roles.items():
            self.pointers.setdefault(pointer(tensors[name]), role)
        if isinstance(instance, nn.Module):
            hooked: set[int] = set()
            for layer_name, layer in instance.named_modules():
                if is_projection(layer) and not _inside_mha(instance, layer_name):
                    self.handles.append(layer.register_forward_hook(self._hook(layer_name)))
                    hooked.update(pointer(p) for p in layer.parameters(recurse=False))
            norm = dict(instance.named_children()).get(pre_norm) if pre_norm else None
            if norm is not None:
                self.handles.append(norm.register_forward_hook(self._normalised))
            for name, param in instance.named_parameters():
                if pointer(param) not in hooked and param.ndim in (1, 2):
                    self.parameters.setdefault(pointer(param), (name, param))
                if pointer(param) not in hooked and param.ndim >= 2:  # read as an input: learned queries
                    self.pointers.setdefault(pointer(param), f"param:{name}")
                    self.read_parameters[name] = param
        self.__enter__()
        self.active = True

    def _hook(self, layer_name: str):
        def hook(layer: nn.Module, args: tuple, output: Any) -> None:
            features_last = not isinstance(layer, (nn.Conv1d, nn.Conv2d))  # a conv's channels are axis 1
            self._record(
                layer_name, linear_weight(layer), _detached(getattr(layer, "bias", None)), args, output, features_last
            )

        return hook

    def _normalised(self, layer: nn.Module, args: tuple, output: Any) -> None:
        """The pre-norm's output is read as the input it normalised."""
        self._read_through(args, output)

    def _read_through(self, args: tuple, result: Any, *, parameters_only: bool = False) -> None:
        """``result`` is read as what its first argument is read as (a pre-norm's output as the input it
        normalised; with ``parameters_only``, a copy of learned queries as that parameter, ``param:<name>``)."""
        read = self.pointers.get(pointer(args[0])) if args and isinstance(args[0], torch.Tensor) else None
        if read is None or (parameters_only and not read.startswith("param:")) or not isinstance(result, torch.Tensor):
            return
        self.outputs.append(result)
        self.pointers.setdefault(pointer(result), read)

    def _record(
        self,
        name: str,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        args: tuple,
        output: Any,
        features_last: bool = True,
    ) -> None:
        read = "other"
        if args and isinstance(args[0], torch.Tensor):
            read = self.pointers.get(pointer(args[0]), "other")
        self.calls.append((name, weight.detach(), _detached(bias), read))
        if isinstance(output, torch.Tensor):
            self.outputs.append(output)
            if features_last and output.ndim >= 2 and output.shape[-1] == weight.shape[0]:
                self.features[len(self.calls) - 1] = output
            self.pointers.setdefault(pointer(output), f"layer:{name}")

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _SOFTMAX and args and isinstance(args[0], torch.Tensor):
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            if isinstance(dim, int) and len(self.softmax) < 32:
                self.softmax.append({"shape": list(args[0].shape), "dim": dim % max(args[0].ndim, 1)})
                self._flow(args[:1])
        if func is F.scaled_dot_product_attention and len(args) >= 2 and len(self.softmax) < 32:
            query, key = args[0], args[1]  # its softmax runs over (..., query, key) scores, on the last axis
            if isinstance(query, torch.Tensor) and isinstance(key, torch.Tensor) and query.ndim >= 2:
                shape = [*query.shape[:-1], key.shape[-2]]
                self.softmax.append({"shape": shape, "dim": len(shape) - 1})
                self._flow((query, key))
        if func is F.multi_head_attention_forward:
            self._multi_head(args, kwargs)
        result = func(*args, **kwargs)
        if func in _COPIES:
            self._read_through(args, result, parameters_only=True)
        elif func is F.linear or func is torch._C._nn.linear:
            self._linear(args, kwargs, result)
        elif func in _MATMUL and len(args) == 2:
            self._matmul(args, result)
        elif func is torch.einsum:
            self._einsum(args, result)
        return result

    def _flow(self, scores: tuple[torch.Tensor, ...]) -> None:
        """At the first scores: which columns of the projections so far reach them (once; best effort:
        this runs inside the user's forward, which must go on as written whatever the graph allows)."""
        if self.to_scores is not None:
            return
        self.to_scores = {}
        with contextlib.suppress(Exception):  # no flow is an answer; a crash here would be blamed on the user
            self.to_scores = columns_to_scores(scores, self.features)

    def _parameter(self, tensor: Any) -> str | None:
        """The name of the raw parameter ``tensor`` is, or is rows of (``in_proj_weight[32:64]``)."""
        if not isinstance(tensor, torch.Tensor) or tensor.ndim != 2:
            return None
        found = self.parameters.get(pointer(tensor))
        if found is None:
            return None
        name, param = found
        offset = tensor.storage_offset() - param.storage_offset()
        if offset == 0 and tensor.numel() == param.numel():
            return name
        if param.ndim == 2 and tensor.stride() == param.stride() and offset % param.stride(0) == 0:
            start = offset // param.stride(0)
            return f"{name}[{start}:{start + tensor.shape[0]}]"
        return f"{name}[view]"

    def _linear(self, args: tuple, kwargs: dict, result: Any) -> None:
        weight = args[1] if len(args) > 1 else kwargs.get("weight")
        name = self._parameter(weight)
        if name is not None:
            self._record(name, weight, _detached(args[2] if len(args) > 2 else kwargs.get("bias")), args[:1], result)

    def _matmul(self, args: tuple, result: Any) -> None:
        name = self._parameter(args[1])
        if name is not None and isinstance(args[0], torch.Tensor):
            self._record(name, args[1].T, None, args[:1], result)

    def _einsum(self, args: tuple, result: Any) -> None:
        operands = list(args[1]) if len(args) == 2 and isinstance(args[1], (list, tuple)) else list(args[1:])
        if len(operands) != 2 or not isinstance(args[0], str):
            return
        match = re.fullmatch(r"\s*([\w.]+)\s*,\s*([\w.]+)\s*->\s*([\w.]+)\s*", args[0])
        if match is None:
            return
        subscripts = list(match.groups()[:2])
        for index in (0, 1):
            name = self._parameter(operands[index])
            weight = _einsum_weight(subscripts[1 - index], subscripts[index], match.group(3), operands[index])
            if name is not None and weight is not None:
                self._record(name, weight, None, (operands[1 - index],), result)

    def _multi_head(self, args: tuple, kwargs: dict) -> None:
        """Q, K, V and output projections of an ``F.multi_head_attention_forward`` call."""
        call = _MHA_SIGNATURE.bind(*args, **kwargs).arguments
        inputs = (call["query"], call["key"], call["value"])
        prefix = (self._parameter(call.get("in_proj_weight")) or "in_proj_weight").removesuffix("_weight")
        if call.get("use_separate_proj_weight"):
            weights = [call["q_proj_weight"], call["k_proj_weight"], call["v_proj_weight"]]
        else:
            weights = list(call["in_proj_weight"].chunk(3))
        bias = call.get("in_proj_bias")
        biases = list(bias.chunk(3)) if isinstance(bias, torch.Tensor) else [None] * 3
        for part, weight, part_bias, tensor in zip("qkv", weights, biases, inputs, strict=True):
            self._record(f"{prefix}.{part}", weight, part_bias, (tensor,), None)
        out_name = self._module_of(call["out_proj_weight"]) or "out_proj"
        self.calls.append((out_name, call["out_proj_weight"].detach(), _detached(call.get("out_proj_bias")), "other"))

    def _module_of(self, weight: torch.Tensor) -> str | None:
        name = self._parameter(weight)
        return name.removesuffix(".weight") if name else None

    def close(self) -> None:
        if self.active:
            self.__exit__(None, None, None)
            self.active = False
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def report(self, out: Tensors) -> list[dict[str, Any]]:
        layers = []
        for index, (name, weight, bias, read) in enumerate(self.calls):
            out[f"layer{index}/weight"] = weight.to("cpu", torch.float64)
            if bias is not None:
                out[f"layer{index}/bias"] = bias.to("cpu", torch.float64)
            flow = (self.to_scores or {}).get(index)
            if flow is not None:
                out[f"layer{index}/to_scores"] = flow.to(torch.float64)
            layers.append({
                "name": name, "read": read, "out": weight.shape[0], "in": weight.shape[1], "bias": bias is not None,
                "to_scores": flow is not None,
            })
            param = self.read_parameters.get(read.removeprefix("param:"))
            if read.startswith("param:") and param is not None:
                out[f"declared/{read.replace(':', '/', 1)}"] = param.detach().to("cpu", torch.float64)
        self.outputs, self.features = [], {}
        return layers


def _detached(tensor: Any) -> torch.Tensor | None:
    return tensor.detach() if isinstance(tensor, torch.Tensor) else None


def _inside_mha(instance: nn.Module, layer_name: str) -> bool:
    """The output projection of an ``nn.MultiheadAttention``: recorded from its call, not by a hook."""
    parent = layer_name.rpartition(".")[0]
    owner = instance.get_submodule(parent) if parent else instance
    return isinstance(owner, nn.MultiheadAttention)


def _einsum_weight(x_sub: str, w_sub: str, out_sub: str, weight: Any) -> torch.Tensor | None:
    """The (out, in) weight of ``einsum(x_sub, w_sub -> out_sub)`` when it is ``x @ W`` on the last axis."""
    if not isinstance(weight, torch.Tensor) or len(w_sub) != 2 or not x_sub:
        return None
    contracted = x_sub[-1]
    if contracted not in w_sub or contracted in out_sub:
        return None
    produced = w_sub.replace(contracted, "", 1)
    if out_sub != x_sub[:-1] + produced:
        return None
    return weight.T if w_sub[0] == contracted else weight
