"""Test helpers for the dynamic checker: fixtures through the static pass, and an in-process child.

The real sandbox starts a process per file; most tests only need the same
request/reply protocol, so ``in_process_child`` imports the fixture here and
calls ``executor.run`` directly (milliseconds instead of a second per file).
"""

from __future__ import annotations

import importlib.util
import re
import sys
import textwrap
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from attncheck.dynamic.inside import executor
from attncheck.sources import Source
from attncheck.static.engine import FileResult, lint
from attncheck.static.rules import all_rules

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@dataclass
class Reply:
    facts: dict
    tensors: dict[str, np.ndarray]


@dataclass
class Outcome:
    status: str = "ok"
    reason: str = ""
    replies: list[Reply] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    isolation: str = "in-process"


_MODULES: dict[Path, object] = {}


def write_module(folder: Path, text: str) -> Path:
    """A user's module (dedented ``text``) as ``user_attention.py`` in ``folder``."""
    path = folder / "user_attention.py"
    path.write_text(textwrap.dedent(text))
    return path


def import_path(path: Path):
    if path not in _MODULES:
        spec = importlib.util.spec_from_file_location(f"fixture_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # as a real import: flex_attention's tracing looks the module up
        spec.loader.exec_module(module)
        _MODULES[path] = module
    return _MODULES[path]


_ONE_CHILD_AT_A_TIME = threading.Lock()


def in_process_child(path: Path, request: dict, tensors: dict[str, np.ndarray]) -> Outcome:
    """The sandbox protocol without the process: import, run the executor, convert to numpy.

    Real children are processes; here they share this one, and the executor sets
    process-wide torch state (the default dtype), so runs from parallel jobs take turns.
    """
    with _ONE_CHILD_AT_A_TIME:
        return _run_in_process(path, request, tensors)


def _run_in_process(path: Path, request: dict, tensors: dict[str, np.ndarray]) -> Outcome:
    try:
        module = import_path(path)
    except Exception as exc:
        return Outcome(replies=[Reply({"unit": "import", "error": executor.error_facts(exc, str(path))}, {})])
    inputs = {name: torch.from_numpy(array) for name, array in tensors.items()}
    replies = [
        Reply(facts, {k: v.numpy() for k, v in out.items()})
        for facts, out in executor.run(module, request, inputs)
    ]
    return Outcome(replies=replies)


def file_result(path: Path) -> FileResult:
    """The static pass over a fixture: its findings and the targets the dynamic stage runs."""
    return lint(Source(str(path), path.read_text(encoding="utf-8")), all_rules())


def expected_codes(path: Path) -> set[str]:
    match = re.search(r"^# dynamic: (.+)$", path.read_text(), re.MULTILINE)
    return {code.strip() for code in match.group(1).split(",")} if match else set()


@dataclass(frozen=True)
class Options:
    timeout: float = 20.0
    device: str = "auto"
    jobs: int = 1
    targets: dict = field(default_factory=dict)
    unsafe_no_sandbox: bool = False
    compile: bool = False


def checked_target(path: Path) -> tuple[list, object, dict]:
    """A one-target file through the dynamic checker in process: its findings, its result, and its
    checks by name (what the probe tests assert on)."""
    from attncheck.dynamic.runner import check_file  # the runner imports the whole pipeline: only when used

    findings, (result,) = check_file(file_result(path), Options(), in_process_child)
    return findings, result, {check.name: check for check in result.checks}
