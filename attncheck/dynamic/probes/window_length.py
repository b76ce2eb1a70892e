"""The window-length probe: a declared sliding window or chunk, judged on a sequence longer than it.

The plain run has 7 tokens, and a causal window or chunk of 7 or more keys hides nothing there:
a window ignored, off by one (W - 1 keys where the declaration says W or W + 1) or measured on
the wrong side (j - i < W, which the causal mask makes always true) passes as plain causal
attention. Where the module declares a window
or chunk (``sliding_window``, ``window_size``, ``attention_chunk_size``, ``chunk_size``), the child
runs 16 tokens, setting a longer window smaller through its constructor or config
(``inside.variant_runs``), and the output is judged against the declaration's readings at that
length (``declared_run``). A mismatch that equals plain causal attention, or a window of one key
fewer or more, is ATT305 (the mask's band has the wrong edge); with a mask argument, a window the
module does not apply itself may come in through that mask (as in HF's Mistral): skipped. Where
the plain output already misses the reference (the binding gives a config-built class a window of
3 keys, which shows on 7 tokens), a long run that is a wrong edge of the window names the mistake
behind that mismatch.
"""

from __future__ import annotations

from attncheck.dynamic import codes
from attncheck.dynamic.binding.bind import Binding
from attncheck.dynamic.probes import declared_run
from attncheck.dynamic.probes.base import FunctionProbe, JudgeView, Outcome, Planner, as_list
from attncheck.dynamic.reference.variant_fit import CHUNK_NAMES, WINDOW_NAMES, spelled
from attncheck.findings import Check

NAME = "window-length"
EXPERIMENT = "window/long"
LENGTH = 16


def wanted(binding: Binding) -> bool:
    """A self-attention class: the child runs the long input only where it declares a window or chunk."""
    return binding.target.is_class and binding.forward is not None and binding.style == "self"


def plan(planner: Planner) -> None:
    """One run of ``LENGTH`` fresh tokens, marked for a declared window or chunk."""
    x = planner.tensor("window/x", planner.random(LENGTH))
    planner.add(EXPERIMENT, {role: x for role in planner.plain}, variant="window")


def _wrong_edges(view: JudgeView, name: str, size: int, said: str) -> list[tuple[str, float]]:
    """(what the module does, error) for the window mistakes the long run can show, closest first;
    ``name`` is the declared scalar's key, and the texts call it what the module does."""
    shown = spelled(declared_run.held(view, EXPERIMENT), name)
    unset = dict.fromkeys(WINDOW_NAMES + CHUNK_NAMES)
    ignored = (
        f"plain causal attention: the declared {said} is ignored (or measured on the future side, j - i < W, "
        "which keeps every past key)"
    )
    tried = [(ignored, unset, "top-left")]
    if name in WINDOW_NAMES:
        tried += [
            (f"a window of {size - 1} keys: one fewer than {shown} = {size} allows", {name: size - 1}, None),
            (f"a window of {size + 2} keys: one more than {shown} = {size} allows", {name: size + 2}, None),
        ]
    found = []
    for what, scalars, causal in tried:
        best = declared_run.readings(view, EXPERIMENT, causal, **scalars)
        found.append((what, best[0].error if best else float("inf")))
    return sorted(found, key=lambda pair: pair[1])


def verdict(view: JudgeView) -> Outcome | None:
    """The window-length check, or None where no window or chunk is declared."""
    if EXPERIMENT not in view.experiments:
        return None
    declared = declared_run.term(view, EXPERIMENT, "window")
    if declared is None:
        return None
    name, size = declared
    scalars = (view.facts.get("declared") or {}).get("scalars", {})
    original, shown = scalars.get(name, size), spelled(scalars, name)
    said = f"{shown} = {size}" if original == size else f"{shown} = {original}, set to {size} for the run,"
    not_run = declared_run.not_run(view, EXPERIMENT, NAME, f"{LENGTH}-token")
    if not_run is not None:
        return not_run, None, ""
    skipped = declared_run.unjudged(view, EXPERIMENT, NAME, f"{LENGTH}-token")
    if skipped is not None:
        return _window_behind_the_mismatch(view, name, size, said) or (skipped, None, "")
    best = declared_run.readings(view, EXPERIMENT)
    detail = f"{said} on {LENGTH} tokens: closest reading {best[0].name}, max error {best[0].error:.3g}"
    if best[0].error <= view.tol:
        return Check(NAME, "passed", f"{detail} (tolerance {view.tol:g})"), None, ""
    what, error = _wrong_edges(view, name, size, said)[0]
    if error > view.tol:
        message = (
            f"on {LENGTH} tokens the output matches no reading of the declared {said} "
            f"(closest {best[0].name}, error {best[0].error:.3g}, tolerance {view.tol:g})"
        )
        return Check(NAME, "failed", detail), codes.REFERENCE_MISMATCH, message
    detail += f"; it equals {what} (error {error:.3g})"
    if what.startswith("plain") and _window_may_come_in_the_mask(view):
        reason = f"{detail}; forward takes a mask, through which the caller may pass the window"
        return Check(NAME, "skipped", reason), None, ""
    keep = _keep_rule(name, shown)
    return Check(NAME, "failed", detail), "ATT305", _wrong_window(what, error, view.tol, keep)


def _window_may_come_in_the_mask(view: JudgeView) -> bool:
    """A forward that takes a mask may leave the window to its caller (HF's Mistral)."""
    return bool(view.binding.forward and view.binding.forward.mask_name)


def _keep_rule(name: str, shown: str) -> str:
    if name in CHUNK_NAMES:
        return f"j <= i and i // {shown} == j // {shown}"
    return f"i - {shown} < j <= i (HF) or i - {shown} <= j <= i (flash-attn)"


def _wrong_window(what: str, error: float, tol: float, keep: str) -> str:
    return (
        f"the window is wrong: on {LENGTH} tokens the output is {what} "
        f"(error {error:.3g}, tolerance {tol:g}). Fix: keep key j for query i when {keep}"
    )


def _window_behind_the_mismatch(view: JudgeView, name: str, size: int, said: str) -> Outcome | None:
    """ATT305 when the plain output already misses the reference (a window set short enough to show
    on the plain run, as the binding sets a config's) and the long run is a wrong edge of the window:
    the mistake that explains the plain mismatch. None when the long run cannot say (no projections
    identified, or no wrong edge fits either): the plain mismatch is reported where it was found."""
    fit = view.fit
    if fit is None or fit.assignment is None:
        return None
    what, error = _wrong_edges(view, name, size, said)[0]
    if error > view.tol or (what.startswith("plain") and _window_may_come_in_the_mask(view)):
        return None
    detail = f"{said} on {LENGTH} tokens: the plain run misses the reference; it equals {what} (error {error:.3g})"
    keep = _keep_rule(name, spelled(declared_run.held(view, EXPERIMENT), name))
    return Check(NAME, "failed", detail), "ATT305", _wrong_window(what, error, view.tol, keep)


PROBE = FunctionProbe(
    NAME, ("ATT305", codes.REFERENCE_MISMATCH), 50, wanted, plan, lambda view: as_list(verdict(view))
)
