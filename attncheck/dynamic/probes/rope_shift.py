"""The RoPE relative-position probe, parent side: shifting every position leaves the output unchanged.

RoPE's defining property is that q·k depends only on ``p_k - p_q``, so a
self-attention module with RoPE on q and k gives the same output for positions
``0..s-1`` and ``c..c+s-1``. The probe is planned for rotary targets whose
forward takes positions (``position_ids``-like tensors, or ``start_pos``-like
integer offsets, found by ``binding``): one run at the base positions and one
per shift, positions kept inside the rotary cache the binding built
(``binding.position_limit``). A correct RoPE of either convention, partial
rotary too, passes; one that is not relative (q and k rotated by different
rules, only q rotated, absolute offsets) is ATT402. When the shift rotates
each head's output without moving its attention weights (every per-head output
keeps its norm), V is rotated too: ATT404.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from attncheck.dynamic.binding.bind import Binding, position_limit
from attncheck.dynamic.probes.base import FunctionProbe, JudgeView, Outcome, Planner, as_list
from attncheck.dynamic.probes.gqa import per_head
from attncheck.dynamic.reference.tolerance import max_error
from attncheck.findings import Check

NAME = "rope-relative-shift"
SHIFTS = (3, 17)
UNBOUNDED = 64  # positions assumed safe when the binding does not size the module's rotary cache
LAYOUTS = {"bs": "(batch, seq)", "s": "(seq,)"}  # position tensors, in the order tried
NAMED_ELSEWHERE = ("ATT402", "ATT404")


def wanted(binding: Binding) -> bool:
    """A rotary self-attention class: the only targets whose output must be shift-invariant."""
    return binding.target.is_class and "rope" in binding.target.kinds


def shifts(binding: Binding, seq: int) -> tuple[int, ...]:
    """The shifts to try, each keeping positions ``c..c+seq-1`` inside the module's rotary cache."""
    limit = position_limit(binding) or UNBOUNDED
    room = limit - seq
    return tuple(sorted({min(c, room) for c in SHIFTS if room > 0}))


def plan(planner: Planner) -> None:
    """A base run and one run per shift of the plain (batch, seq) input, for each way of passing positions."""
    binding, plain, add, tensor = planner.binding, planner.plain, planner.add, planner.tensor
    batch, seq = planner.positions
    forward = binding.forward
    if binding.style != "self" or forward is None or forward.position_name is None:
        return
    name = forward.position_name
    offsets = (0, *shifts(binding, seq))
    if forward.position_kind == "offset":
        for c in offsets:
            add(f"rope-shift/offset/+{c}", plain, constants={name: c})
        return
    for layout in LAYOUTS:
        for c in offsets:
            positions = np.arange(c, c + seq, dtype=np.int64)
            if layout == "bs":
                positions = np.broadcast_to(positions, (batch, seq)).copy()
            add(f"rope-shift/{layout}/+{c}", plain, keywords={name: tensor(f"positions/{layout}/+{c}", positions)})


def _variants(judge: JudgeView) -> list[str]:
    """The layouts whose every run succeeded, those that reproduce the plain output at base positions first."""
    planned = [n for n in judge.experiments if n.startswith("rope-shift/")]
    layouts = list(dict.fromkeys(n.split("/")[1] for n in planned))
    complete = [lay for lay in layouts if all(judge.ran(n) for n in planned if n.split("/")[1] == lay)]
    if not judge.ran("plain"):
        return complete

    def reproduces(layout: str) -> bool:
        return max_error(judge.output(f"rope-shift/{layout}/+0"), judge.output("plain")) <= judge.tol

    return sorted(complete, key=lambda lay: not reproduces(lay))


def _rotates_value(judge: JudgeView, base: str, moved: Sequence[str]) -> bool:
    """Every head's output keeps its norm under the shift: the weights did not move, V was rotated."""
    heads = judge.binding.dims.heads
    before = per_head(judge, base, heads).norm(dim=-1)
    return all(max_error(per_head(judge, name, heads).norm(dim=-1), before) <= judge.tol for name in moved)


def verdict(judge: JudgeView, named: Sequence[str | None] = ()) -> Outcome | None:
    """The rope-relative-shift check, or None for targets it does not apply to.

    ``named`` holds the codes other checks reported: when one already names a RoPE
    mistake (the reference diagnosis), the shift check fails without a second finding.
    """
    binding = judge.binding
    if not wanted(binding):
        return None
    forward = binding.forward
    if binding.style != "self":
        return Check(NAME, "skipped", "only self-attention is shifted (query and key positions differ)"), None, ""
    if forward is None or forward.position_name is None:
        reason = "applies RoPE but forward takes no positions (position_ids, positions, start_pos, offset...)"
        return Check(NAME, "skipped", reason), None, ""
    variants = _variants(judge)
    if not variants:
        first = next(n for n in judge.experiments if n.startswith("rope-shift/"))
        error = judge.facts["experiments"].get(first, {}).get("error", {})
        reason = f"passing {forward.position_name} raised {error.get('type', 'an error')}: {error.get('message', '')}"
        return Check(NAME, "skipped", reason.rstrip(": ")), None, ""
    layout = variants[0]
    base = f"rope-shift/{layout}/+0"
    moved = [n for n in judge.experiments if n.startswith(f"rope-shift/{layout}/+") and n != base]
    if not moved:
        reason = f"the module's rotary cache ({position_limit(binding)} positions) leaves no room to shift"
        return Check(NAME, "skipped", reason), None, ""
    changes = {int(n.rsplit("+", 1)[1]): max_error(judge.output(n), judge.output(base)) for n in moved}
    how = "as an offset" if layout == "offset" else f"as a {LAYOUTS[layout]} tensor"
    numbers = ", ".join(f"+{c}: {change:.3g}" for c, change in changes.items())
    detail = (
        f"{forward.position_name} passed {how}; shifting every position changes the output by "
        f"{numbers} (tolerance {judge.tol:g})"
    )
    worst = max(changes.values(), default=0.0)
    if worst <= judge.tol:
        return Check(NAME, "passed", detail), None, ""
    check = Check(NAME, "failed", detail)
    if any(code in NAMED_ELSEWHERE for code in named):
        return check, None, ""
    shift = max(changes, key=changes.__getitem__)
    if _rotates_value(judge, base, moved):
        value = (
            f"shifting every position by {shift} rotates each head's output without moving its attention "
            f"weights (output change {worst:.3g}, tolerance {judge.tol:g}): RoPE is applied to V; "
            "rotate q and k only"
        )
        return check, "ATT404", value
    relative = (
        f"the rotary embedding is not relative: shifting every position by {shift} changes the output by "
        f"{worst:.3g} (tolerance {judge.tol:g}); q·k must depend only on the distance between positions, so "
        "q and k must be rotated by the same rule (same sign, same frequencies) at their own positions"
    )
    return check, "ATT402", relative


PROBE = FunctionProbe(
    NAME, ("ATT404",), 40, wanted, plan, lambda view: as_list(verdict(view, view.found_codes))
)
