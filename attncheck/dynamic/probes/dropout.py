"""The dropout probe: randomness off in eval mode, attention dropout on in training mode.

Two eval-mode calls of the plain inputs must be identical (ATT908 otherwise: dropout or
randomness active in eval mode). A class with a dropout argument or module is also built with
dropout 0.5 and called twice in train mode: identical outputs mean the dropout never takes
effect (ATT103): ``F.dropout`` called with ``training=False``, say, or its result discarded.
"""

from __future__ import annotations

import torch

from attncheck.dynamic import codes
from attncheck.dynamic.probes.base import FunctionProbe, JudgeView, Outcome, Planner, every_target, outcome
from attncheck.findings import Check


def plan(planner: Planner) -> None:
    """Two eval-mode calls; for a class, on its dropout instance, and two train-mode calls."""
    is_class = planner.binding.target.is_class
    instance = "dropout" if is_class else "exact"
    for name, mode in (("eval-a", "eval"), ("eval-b", "eval"), ("train-a", "train"), ("train-b", "train")):
        if is_class or mode == "eval":
            planner.add(name, planner.plain, instance=instance, mode=mode)


def judge(view: JudgeView) -> list[Outcome]:
    """eval-deterministic, and dropout-active for a class."""
    found = [_eval_determinism(view)]
    if view.binding.target.is_class:
        found.append(_dropout_active(view))
    return found


def _eval_determinism(view: JudgeView) -> Outcome:
    if not (view.ran("eval-a") and view.ran("eval-b")):
        return Check("eval-deterministic", "skipped", "the eval experiments raised"), None, ""
    a, b = view.output("eval-a").nan_to_num(0.0), view.output("eval-b").nan_to_num(0.0)
    change = float((a - b).abs().max()) if a.shape == b.shape else float("inf")
    detail = f"two eval-mode calls differ by {change:.3g}"
    return outcome(
        "eval-deterministic", change == 0.0, detail, codes.EVAL_NONDETERMINISM,
        f"output differs by {change:.3g} between two eval-mode calls (dropout or randomness active in eval mode)",
    )


def _dropout_active(view: JudgeView) -> Outcome:
    dropout = view.facts.get("dropout", {})
    if not (dropout.get("configured") or dropout.get("modules")):
        return Check("dropout-active", "skipped", "no dropout argument or module"), None, ""
    if not (dropout.get("modules") or view.binding.names_dropout):
        return Check("dropout-active", "skipped", "its code names no dropout: the config's rates are not its"), None, ""
    if not (view.ran("train-a") and view.ran("train-b")):
        return Check("dropout-active", "skipped", "the train-mode experiments raised"), None, ""
    a, b = view.output("train-a"), view.output("train-b")
    differ = a.shape != b.shape or not torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
    detail = (
        f"dropout set to 0.5: two train-mode calls {'differ' if differ else 'are identical'}; "
        f"dropout modules: {dropout.get('modules', 0)}, called {dropout.get('calls', 0)} times"
    )
    if dropout.get("modules"):
        seen = f"dropout modules called {dropout.get('calls', 0)} times"
    else:  # the rate was taken (an argument or the config's) and nothing holds it: no layer, no F.dropout
        seen = "the module takes a dropout rate, builds no dropout layer and applies no dropout function"
    return outcome(
        "dropout-active", differ, detail, "ATT103",
        f"attention dropout never takes effect: with p=0.5 two train-mode calls give identical outputs ({seen})",
    )


PROBE = FunctionProbe("dropout", (codes.EVAL_NONDETERMINISM, "ATT103"), 6, every_target, plan, judge)
