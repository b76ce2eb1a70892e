"""Every hostile fixture against the jail: the attack, how it ended, and how long it took.

Run from the repository root: ``python bench/hostile.py [--grade] [NAME...]`` (default: every
file in fixtures/hostile/). Each runs in a fresh child with the sandbox tests' entry, which calls
the module's ``Attention`` (when it has one) and sends back what the module recorded in
``REPORT``: by default in ``attncheck check``'s jail (bubblewrap), with ``--grade`` in
``attncheck grade``'s (a child of the zygote that jails itself).
The first line of each file's docstring is the attack.
"""

from __future__ import annotations

import ast
import sys
import time
from pathlib import Path

import numpy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attncheck.dynamic.harness import forked, sandbox  # noqa: E402

HOSTILE = ROOT / "fixtures" / "hostile"
REQUEST = {"entry": "tests.sandbox_entries:forward_then_report"}
TENSORS = {"x": numpy.random.default_rng(0).standard_normal((2, 4, 8)).astype(numpy.float32)}
LIMITS = sandbox.Limits(timeout_s=5, workdir_mb=64)


def attack(path: Path) -> str:
    """The first line of the module's docstring, without its 'Hostile:' label."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or path.stem
    return docstring.splitlines()[0].removeprefix("Hostile:").strip()


def outcome_line(outcome: sandbox.ChildOutcome) -> str:
    """The status and reason, and what the module recorded when it got that far."""
    recorded = next((reply.facts for reply in outcome.replies if reply.facts.get("unit") == "report"), None)
    text = f"{outcome.status}: {outcome.reason}"
    if recorded and recorded.get("report"):
        text += f" | recorded {recorded['report']}"
    if recorded and recorded.get("started"):
        text += f" | {recorded['started']} threads started"
    return text


def main(names: list[str]) -> None:
    graded = "--grade" in names
    names = [name for name in names if name != "--grade"]
    paths = [HOSTILE / f"{name.removesuffix('.py')}.py" for name in names] or sorted(HOSTILE.glob("*.py"))
    print(f"isolation: {forked.FORKED_JAIL if graded and forked.jail_available() else sandbox.isolation_available()}")
    width = max(len(path.stem) for path in paths)
    print(f"{'file':{width}s} {'seconds':>7s}  attack -> outcome")
    for path in paths:
        start = time.monotonic()
        if graded:
            outcome = forked.run_forked(path, REQUEST, TENSORS, LIMITS, [path.parent, ROOT / "tests"])
        else:
            outcome = sandbox.run_child(path, REQUEST, TENSORS, LIMITS)
        seconds = time.monotonic() - start
        print(f"{path.stem:{width}s} {seconds:7.1f}  {attack(path)} -> {outcome_line(outcome)[:400]}")


if __name__ == "__main__":
    main(sys.argv[1:])
