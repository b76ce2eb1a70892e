"""What a failed import of the user's module means: a missing dependency, or the user's error.

A third-party module that is not installed is not a mistake in the user's attention code: the
target is skipped with "needs X (not installed in this environment)". Anything else the import
raises is the code's own (its import-time code, a missing module of its own project, a package
whose installed version lacks what it imports) and stays an error.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from attncheck.dynamic.loading import project


def import_outcome(facts: Mapping[str, Any], load: Mapping[str, Any]) -> tuple[Literal["skipped", "error"], str]:
    """The status and reason of every target of a file whose import replied ``facts``."""
    error = facts.get("error") or {}
    if not isinstance(error, Mapping):
        return "error", f"importing the module failed: {error}"
    missing = error.get("missing_module")
    roots = tuple(Path(root) for root in load.get("roots", ()))
    if isinstance(missing, str) and missing and not project.is_project_module(missing, roots):
        top = missing.partition(".")[0]
        if not _installed(top):
            return "skipped", f"needs {top} (not installed in this environment)"
    text = f"importing the module failed: {error.get('type', 'Error')}: {error.get('message', '')}".rstrip(": ")
    line = error.get("line")
    return "error", text + (f" (line {line})" if isinstance(line, int) else "")


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
