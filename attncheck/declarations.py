"""``[tool.attncheck.targets.NAME]`` declarations, validated when the configuration is loaded.

A declaration tells the dynamic check how to build and call a module it cannot guess.
A typo in one (an unknown key, ``mask = "kept"``, ``heads = "4"``, the name of a class
that was renamed) would otherwise only show as a target skipped, or checked the wrong
way, minutes later; so each is a configuration error (exit 2) before any file is read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

from attncheck.errors import ConfigError


def validate(targets: Mapping[str, Mapping[str, Any]], path: Path) -> None:
    """Raise ConfigError for the first declaration key or value the dynamic check could not use,
    or for a declaration whose class or function is defined nowhere under the configuration's folder."""
    for name, declaration in targets.items():
        check_declaration(name, declaration, str(path))
    missing = _undefined(set(targets), path.parent)
    if missing:
        raise ConfigError(f"{path}: [tool.attncheck.targets.{missing[0]}] declares a class or function that is "
                          f"not defined in any Python file under {path.parent} (renamed, or a typo?)")


def check_declaration(name: str, declaration: Mapping[str, Any], where: str) -> None:
    """Raise ConfigError for the first key or value of one declaration the dynamic check could not use."""
    for key, value in declaration.items():
        problem = _problem(key, value, declaration)
        if problem:
            raise ConfigError(f"{where}: [tool.attncheck.targets.{name}] {problem}")


def _problem(key: str, value: Any, declaration: Mapping[str, Any]) -> str | None:
    from attncheck.dynamic.binding.bind import DECLARATION_KEYS, ROLE_NAMES, MaskConvention, RopeConvention

    if key not in DECLARATION_KEYS:
        return f"unknown key {key!r} (known: {', '.join(DECLARATION_KEYS)})"
    if key == "init" and not isinstance(value, Mapping):
        return "init must be a table of constructor arguments, like init = { d_model = 64, n_heads = 4 }"
    if key == "forward":
        if not isinstance(value, list) or not value or not all(isinstance(role, str) for role in value):
            return 'forward must be a list of roles, like forward = ["query", "key", "value", "mask"]'
        unknown = [role for role in value if role.lower() not in ROLE_NAMES]
        if unknown:
            return f"forward: unknown role {unknown[0]!r} (known: {', '.join(ROLE_NAMES)})"
    if key == "mask" and value not in get_args(MaskConvention):
        return f"mask must be one of {', '.join(map(repr, get_args(MaskConvention)))}, got {value!r}"
    if key == "causal" and not isinstance(value, bool):
        return f"causal must be true or false, got {value!r}"
    if key in ("d_model", "heads", "kv_heads"):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            return f"{key} must be a positive integer, got {value!r}"
        heads = declaration.get("heads")
        if key == "d_model" and isinstance(heads, int) and heads > 0 and value % heads:
            return f"d_model = {value} is not a multiple of heads = {heads}"
        if key == "kv_heads":
            return _kv_heads_problem(value, heads, declaration.get("init"))
    if key == "rope" and value not in get_args(RopeConvention):
        return f"rope must be one of {', '.join(map(repr, get_args(RopeConvention)))}, got {value!r}"
    if key == "rope_base" and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 1):
        return f"rope_base must be a number above 1 (the rotary frequencies' base, like 10000), got {value!r}"
    return None


def _kv_heads_problem(kv_heads: int, heads: Any, init: Any) -> str | None:
    """The K/V head count must divide the query heads, and agree with init's own K/V-head argument."""
    from attncheck.dynamic.binding.bind import KV_HEAD_COUNT_NAMES

    if isinstance(heads, int) and heads > 0 and heads % kv_heads:
        return f"heads = {heads} is not a multiple of kv_heads = {kv_heads}"
    named = {k: v for k, v in init.items() if k.lower() in KV_HEAD_COUNT_NAMES} if isinstance(init, Mapping) else {}
    for name, value in named.items():
        if value != kv_heads:
            return f"kv_heads = {kv_heads} but init sets {name} = {value!r}"
    return None


def _undefined(names: set[str], root: Path) -> list[str]:
    """The names that no ``class NAME`` or ``def NAME`` of a Python file under ``root`` defines."""
    from attncheck.discovery import discover

    pattern = re.compile(rf"^\s*(?:class|(?:async\s+)?def)\s+({'|'.join(map(re.escape, names))})\b", re.MULTILINE)
    left = set(names)
    for candidate in discover([str(root)]):
        try:
            text = candidate.path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        left -= set(pattern.findall(text))
        if not left:
            return []
    return sorted(left)
