"""The assignment file: what to look for, how to build and call it, the variant asked for, the rubric.

TOML, all tables optional (``fixtures/grading/assignment.toml`` is a complete example)::

    [assignment]
    name = "Multi-head self-attention"
    target = "MultiHeadSelfAttention"   # a class or function name; "auto": the attention target
    variant = "mha"                     # mha | causal | cross | gqa | rope
    kv_heads = 2                        # gqa only: the number of K/V heads
    rope = "half"                       # rope only: "half" (rotate_half) or "interleaved"
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
from typing import Any

from attncheck.catalogue import CODES
from attncheck.config import ConfigError
from attncheck.declarations import check_declaration
from attncheck.grade.rubric import DEFAULT_POINTS, DEFAULT_STATIC_POINTS, GROUPS, Rubric

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

VARIANTS = ("mha", "causal", "cross", "gqa", "rope")
ROPE_CONVENTIONS = ("half", "interleaved")
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
        """The ``[tool.attncheck.targets.NAME]`` declaration for the graded target."""
        declared = dict(self.call)
        if self.variant == "causal":
            declared.setdefault("causal", True)
        return declared


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
    _known(head, ("name", "target", "variant", "kv_heads", "rope", "timeout"), "assignment.")
    variant = head.get("variant", "mha")
    if variant not in VARIANTS:
        raise AssignmentError(f"assignment.variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    kv_heads = head.get("kv_heads")
    if variant == "gqa" and not (isinstance(kv_heads, int) and kv_heads > 0):
        raise AssignmentError("assignment.kv_heads: a gqa assignment needs the number of K/V heads (an integer)")
    rope = head.get("rope")
    if variant == "rope" and rope not in ROPE_CONVENTIONS:
        raise AssignmentError(f"assignment.rope must be one of {', '.join(ROPE_CONVENTIONS)} for a rope assignment")
    timeout = head.get("timeout", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise AssignmentError(f"assignment.timeout must be a positive number of seconds, got {timeout!r}")
    call = _table(table, "call")
    try:
        check_declaration(str(head.get("target", AUTO)), call, "[call]")
    except ConfigError as error:
        raise AssignmentError(str(error)) from error
    return Assignment(
        name=str(head.get("name", "attention")),
        target=str(head.get("target", AUTO)),
        variant=variant,
        kv_heads=kv_heads,
        rope=rope,
        timeout=float(timeout),
        call=call,
        rubric=_rubric(_table(table, "rubric"), variant),
        digest=digest,
    )


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

