"""The assignment file: what to look for, how to build and call it, the variant asked for, the rubric.

TOML, all tables optional (``fixtures/grading/assignment.toml`` is a complete example)::

    [assignment]
    name = "Multi-head self-attention"
    target = "MultiHeadSelfAttention"   # a class or function name; "auto": the attention target
    variant = "mha"                     # mha | causal | cross | gqa | rope
    kv_heads = 2                        # gqa only: the number of K/V heads
    rope = "half"                       # rope only: "half" (rotate_half) or "interleaved"
    rope_base = 10000                   # rope, optional: the rotary frequencies' base
    timeout = 20                        # seconds per submission's dynamic check

    [call]                              # the keys of [tool.attncheck.targets.NAME]
    init = { d_model = 32, num_heads = 4 }

    [rubric]
    partial = true
    required = ["mask"]
    [rubric.points]
    shape = 10
    reference = 30
    [rubric.static]
    points = 10
    ATT201 = 3                          # points lost per finding of this code

The variant keys (``kv_heads``, ``rope``, ``rope_base``) join the ``[call]`` declaration
(``declaration``), so the dynamic check builds the module with that many K/V heads and holds it
to them (the gqa-grouping check), and reads its rotary embedding against the convention and
base asked for (the rope-declared check); ``attncheck.declarations`` validates them like any
declaration's.

Without a file the default rubric (``attncheck.grade.rubric``) applies and the attention
target of each submission is found as attncheck finds it. The file's hash is part of the
gradebook's key, so a changed rubric grades everything again.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from attncheck.catalogue import CODES
from attncheck.config import ConfigError
from attncheck.declarations import check_declaration
from attncheck.dynamic.binding.bind import RopeConvention
from attncheck.grade.rubric import DEFAULT_POINTS, DEFAULT_STATIC_POINTS, GROUPS, Rubric

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

VARIANTS = ("mha", "causal", "cross", "gqa", "rope")
ROPE_CONVENTIONS: tuple[str, ...] = get_args(RopeConvention)
AUTO = "auto"
DEFAULT_TIMEOUT_S = 20.0
SECTIONS = ("assignment", "call", "rubric")


class AssignmentError(ValueError):
    """A mistake in the assignment file: one line that says where."""


@dataclass(frozen=True)
class Assignment:
    """Everything a run grades against; ``digest`` keys the gradebook."""

    name: str = "attention"
    target: str = AUTO
    variant: str = "mha"
    kv_heads: int | None = None
    rope: str | None = None
    rope_base: float | None = None
    timeout: float = DEFAULT_TIMEOUT_S
    call: Mapping[str, Any] = field(default_factory=dict)
    rubric: Rubric = field(default_factory=Rubric)
    digest: str = "default"

    def asked_for(self) -> str:
        """The variant in words, for the feedback and the report."""
        words = {"mha": "multi-head attention", "causal": "causal (masked) multi-head attention",
                 "cross": "cross-attention", "gqa": f"grouped-query attention with {self.kv_heads} K/V heads",
                 "rope": f"attention with rotary embeddings ({self.rope} convention)"}
        return words[self.variant]

    def declaration(self) -> dict[str, Any]:
        """The ``[tool.attncheck.targets.NAME]`` declaration for the graded target: ``[call]`` and
        the variant's own keys."""
        return _declaration(self.call, self.variant, self.kv_heads, self.rope, self.rope_base)


def load(path: Path | None) -> Assignment:
    """The assignment in ``path``, or the default one; AssignmentError for a bad file."""
    if path is None:
        return Assignment()
    try:
        data = path.read_bytes()
        table = tomllib.loads(data.decode("utf-8"))
    except OSError as error:
        raise AssignmentError(f"{path}: cannot read: {error.strerror or error}") from error
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise AssignmentError(f"{path}: invalid TOML: {error}") from error
    try:
        return _from_table(table, hashlib.sha256(data).hexdigest()[:16])
    except AssignmentError as error:
        raise AssignmentError(f"{path}: {error}") from error


def _from_table(table: Mapping[str, Any], digest: str) -> Assignment:
    _known(table, SECTIONS, "")
    head = _table(table, "assignment")
    _known(head, ("name", "target", "variant", "kv_heads", "rope", "rope_base", "timeout"), "assignment.")
    variant = head.get("variant", "mha")
    if variant not in VARIANTS:
        raise AssignmentError(f"assignment.variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    kv_heads, rope, rope_base = head.get("kv_heads"), head.get("rope"), head.get("rope_base")
    if variant == "gqa" and kv_heads is None:
        raise AssignmentError("assignment.kv_heads: a gqa assignment needs the number of K/V heads (an integer)")
    if variant == "rope" and rope is None:
        raise AssignmentError(f"assignment.rope must be one of {', '.join(ROPE_CONVENTIONS)} for a rope assignment")
    timeout = head.get("timeout", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise AssignmentError(f"assignment.timeout must be a positive number of seconds, got {timeout!r}")
    call = _table(table, "call")
    try:
        check_declaration(str(head.get("target", AUTO)), _declaration(call, variant, kv_heads, rope, rope_base),
                          "[assignment] and [call]")
    except ConfigError as error:
        raise AssignmentError(str(error)) from error
    return Assignment(
        name=str(head.get("name", "attention")),
        target=str(head.get("target", AUTO)),
        variant=variant,
        kv_heads=kv_heads,
        rope=rope,
        rope_base=rope_base,
        timeout=float(timeout),
        call=call,
        rubric=_rubric(_table(table, "rubric"), variant),
        digest=digest,
    )


def _declaration(call: Mapping[str, Any], variant: str, kv_heads: int | None, rope: str | None,
                 rope_base: float | None) -> dict[str, Any]:
    """``[call]`` with the variant's keys: what the dynamic check builds, calls and holds the target to."""
    declared = dict(call)
    if variant == "causal":
        declared.setdefault("causal", True)
    variant_keys = {"kv_heads": kv_heads, "rope": rope, "rope_base": rope_base}
    declared.update({key: value for key, value in variant_keys.items() if value is not None})
    return declared


def _rubric(table: Mapping[str, Any], variant: str) -> Rubric:
    _known(table, ("points", "static", "required", "partial"), "rubric.")
    points = dict(DEFAULT_POINTS)
    for group, value in _table(table, "points").items():
        if group not in GROUPS:
            raise AssignmentError(f"rubric.points: unknown group {group!r} (groups: {', '.join(GROUPS)})")
        points[group] = _points(value, f"rubric.points.{group}")
    static = _table(table, "static")
    static_points = _points(static.get("points", DEFAULT_STATIC_POINTS), "rubric.static.points")
    costs = {}
    for code, value in static.items():
        if code == "points":
            continue
        if code.upper() not in CODES:
            raise AssignmentError(f"rubric.static: unknown code {code!r} (`attncheck rules` lists them)")
        costs[code.upper()] = _points(value, f"rubric.static.{code}")
    required = table.get("required", [])
    if not isinstance(required, list) or any(g not in GROUPS for g in required):
        raise AssignmentError(f"rubric.required must be a list of groups ({', '.join(GROUPS)})")
    required = [*required, *_required_by(variant)]
    partial = table.get("partial", True)
    if not isinstance(partial, bool):
        raise AssignmentError("rubric.partial must be true or false")
    return Rubric(points, static_points, costs, tuple(dict.fromkeys(required)), partial)


def _required_by(variant: str) -> tuple[str, ...]:
    """A variant's own group must run: a causal assignment with no causal masking earns 0 there."""
    return {"causal": ("causal",), "gqa": ("variant",), "rope": ("variant",)}.get(variant, ())


def _known(table: Mapping[str, Any], keys: tuple[str, ...], prefix: str) -> None:
    unknown = sorted(set(table) - set(keys))
    if unknown:
        raise AssignmentError(f"unknown key {prefix}{unknown[0]!r} (known: {', '.join(keys)})")


def _table(table: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = table.get(key, {})
    if not isinstance(value, Mapping):
        raise AssignmentError(f"{key} must be a table")
    return dict(value)


def _points(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise AssignmentError(f"{where} must be a number of points (0 or more), got {value!r}")
    return float(value)

