"""Runs inside the child: an experiment that makes a declared variant visible runs only where it is declared.

A sliding window or chunk of W equals plain causal attention on W tokens or fewer, a tanh soft-cap
is the identity on small scores, and dynamic NTK scaling engages only past
``max_position_embeddings``: the probes that show them run longer or larger inputs. The parent
plans these experiments for every self-attention class, since it sees a module's declarations
only once the child built it, and marks each with the term it needs (``Experiment.variant``).
Here, with the module built, the term is looked up among its declarations
(``variant_facts.declared_scalars``): where it is absent the experiment does not run
(:class:`NotDeclaredError`, reported as the experiment's error). A window or chunk too long for the
planned input is set smaller through the constructor argument or config field it is read from,
on a second instance built with the same seed (so the same weights), and read back: the parent
judges against the window the run really had, and a window that cannot be set is a skip with why.

With ``compile = true``, the experiment ``compiled`` runs a module whose file or instance holds a
``torch.compile``'d callable (``flex_attention = torch.compile(flex_attention)``) with Dynamo's
default stance, inside the ``force_eager`` every other forward of such code runs under: once,
compiled, in float32 (:func:`compiled_instance`); elsewhere it does not run.

A window attention with a relative-position table (Swin, BEiT) runs on exactly the tokens of its
window, Wh·Ww (plus BEiT's class token): :func:`window_for_length` builds it once, before the
binding's first forward, with a window of 1×L (or 1×(L-1)) so it takes the L tokens the probes pass.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from attncheck.dynamic.inside.variant_facts import declared_scalars
from attncheck.dynamic.reference.variant_fit import CHUNK_NAMES, TERMS, WINDOW_NAMES, declared_term

SPARE = 2  # a window is visible when the input is longer than W + SPARE
COMPILED = "compiled"  # ``Experiment.variant`` of the run that takes the compiled path


class NotDeclaredError(Exception):
    """The module does not declare the experiment's variant term, or it cannot be made visible."""


def prepare(
    instance: nn.Module, term: str, length: int, rebuild: Callable[[dict[str, Any]], nn.Module]
) -> tuple[nn.Module, dict[str, Any]]:
    """The instance to run on ``length`` tokens and its declared scalars; raises NotDeclaredError."""
    scalars = declared_scalars(instance)
    if term == COMPILED:
        return compiled_instance(instance), scalars
    found = declared_term(scalars, term)
    if found is None:
        raise NotDeclaredError(f"the module declares no {TERMS[term]}")
    name, value = found
    if term == "dynamic-rope" and value >= length:
        raise NotDeclaredError(f"max_position_embeddings {value} leaves no position past it in {length} tokens")
    if term != "window" or value + SPARE < length:
        return instance, scalars
    smaller = (length - SPARE) // 2
    names = [n for n in WINDOW_NAMES + CHUNK_NAMES if n in scalars]
    rebuilt = rebuild(dict.fromkeys(names, smaller))
    again = declared_scalars(rebuilt)
    if any(again.get(n) != smaller for n in names):
        raise NotDeclaredError(
            f"{name} = {value} is not shorter than the {length} tokens the probe runs, and setting it to "
            f"{smaller} through the constructor or its config did not change what the module holds"
        )
    return rebuilt, again


class _CompiledRun(nn.Module):
    """The user's module, called with Dynamo's default stance: its compiled callables compile."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with torch.compiler.set_stance("default"):
            return self.inner(*args, **kwargs)


def compiled_instance(instance: nn.Module) -> nn.Module:
    """``instance`` wrapped to run its torch.compile'd callables compiled; NotDeclaredError when
    neither its file nor its attributes hold one."""
    file = sys.modules.get(type(instance).__module__)
    namespaces = [vars(instance), vars(file) if file is not None else {}]
    if not any(hasattr(value, "_torchdynamo_orig_callable") for space in namespaces for value in space.values()):
        raise NotDeclaredError("the module calls no torch.compile'd callable")
    return _CompiledRun(instance)


RELATIVE_WINDOW_NAMES = ("window_size", "window", "win_size")
"""Constructor arguments that set the window of a relative-position table (Swin, BEiT, timm)."""


def relative_index(instance: nn.Module) -> torch.Tensor | None:
    """The module's square ``relative_position_index`` buffer (N×N tokens of its window), None when it has none."""
    for path, tensor in instance.named_buffers():
        if path.rsplit(".", 1)[-1] == "relative_position_index" and tensor.ndim == 2 and len(set(tensor.shape)) == 1:
            return tensor
    return None


class FixedWindowError(Exception):
    """A window attention whose relative-position window no constructor argument sets: it takes only
    its window's tokens, not the probes' (a skip with this reason, not a crash of the forward)."""


def window_for_length(
    instance: nn.Module, length: int, rebuild: Callable[[dict[str, Any]], nn.Module]
) -> dict[str, Any]:
    """Constructor overrides with which a window attention's relative-position index spans ``length``
    tokens; {} when it has no such index or already spans them; FixedWindowError when no window
    argument sets it. A module built without a window (BEiT's ``window_size=None``: no table) is
    given one when that builds a table, so that the table's path is the one checked."""
    index = relative_index(instance)
    if index is not None and index.shape[0] == length:
        return {}
    unset = [name for name in RELATIVE_WINDOW_NAMES if hasattr(instance, name) and getattr(instance, name) is None]
    if index is None and not unset:
        return {}
    for name in unset if index is None else RELATIVE_WINDOW_NAMES:
        for tokens in (length, length - 1):  # BEiT's index also holds the class token
            overrides = {name: (1, tokens)}
            try:
                again = relative_index(rebuild(overrides))
            except Exception:  # a window the constructor refuses: try the next reading
                continue
            if again is not None and again.shape[0] == length:
                return overrides
    if index is None:
        return {}  # no window builds a table of these tokens: checked as built, without one
    raise FixedWindowError(
        f"the module attends within a window of {index.shape[0]} tokens (its relative_position_index is "
        f"{index.shape[0]}x{index.shape[0]}) and no constructor argument ({', '.join(RELATIVE_WINDOW_NAMES)}) "
        f"sets it to the {length} tokens the probes pass; windows partitioned in 2-D are outside the reference: "
        f"give the constructor a window_size argument (declared as init = {{window_size = [1, {length}]}})"
    )
