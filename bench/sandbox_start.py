"""How long a jailed child takes to start, import torch and answer, with and without bubblewrap.

Run from the repository root: ``python bench/sandbox_start.py [runs]``. Prints the median
and the best wall time of each mode, next to a plain ``python -c "import torch"``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import numpy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attncheck.dynamic.harness import sandbox

MODULE = Path(__file__).resolve().parents[1] / "fixtures" / "hostile" / "well_behaved.py"
REQUEST = {"entry": "tests.sandbox_entries:forward"}
TENSORS = {"x": numpy.zeros((2, 4, 8), dtype=numpy.float32)}


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def child_once() -> None:
    outcome = sandbox.run_child(MODULE, REQUEST, TENSORS, sandbox.Limits(timeout_s=60))
    assert outcome.status == "ok", outcome.reason


def plain_import() -> None:
    subprocess.run([sys.executable, "-c", "import torch"], check=True)


def report(label: str, times: list[float]) -> None:
    print(f"{label:38s} median {statistics.median(times):5.2f} s   best {min(times):5.2f} s")


def main(runs: int) -> None:
    print(f"isolation available: {sandbox.isolation_available()}; {runs} runs each")
    report("python -c 'import torch'", [timed(plain_import) for _ in range(runs)])
    if sandbox.isolation_available() == sandbox.BUBBLEWRAP:
        report("child, bubblewrap + rlimits + seccomp", [timed(child_once) for _ in range(runs)])
    with mock.patch.object(sandbox, "isolation_available", lambda: sandbox.RLIMITS_ONLY):
        report("child, rlimits + seccomp", [timed(child_once) for _ in range(runs)])


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
