"""What a pre-commit hook costs: attncheck on one file, side by side with ruff on the same file.

Run from the repository root: ``python bench/precommit.py [runs]`` (default 15). For a file
with attention (``fixtures/correct/dyn_self_attention.py``) and one without (written here),
it times the hook's command line (``attncheck --static-only --no-cache --output-format
concise FILE``: ``--no-cache``, as for a file just changed) and ``ruff check --no-cache
FILE``, each a fresh process as pre-commit starts it, alternating so both see the same load,
and prints the best and the median wall time of each and attncheck's as a ratio to ruff's.
The targets (issue 19): under 0.25 s with attention, under 0.15 s without, best of the runs.
A bare ``python -c pass`` is timed too: the floor every Python tool pays; and ``import libcst,
click`` (row ``imports``): the floor of a lint with attention, whose rules read libcst trees.

Bytecode is written and used, as in any installed package (``PYTHONDONTWRITEBYTECODE`` is
dropped; the ``.pyc`` files go to a scratch ``PYTHONPYCACHEPREFIX``), and one run of each
command before the timed ones writes it.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
ATTENTION = ROOT / "fixtures" / "correct" / "dyn_self_attention.py"
PLAIN = '''"""Data loading: rows of CSV files."""
import csv
import os


def rows(path):
    with open(path, newline="") as handle:
        return [dict(row) for row in csv.DictReader(handle)]


def files(folder):
    return sorted(name for name in os.listdir(folder) if name.endswith(".csv"))
'''
TARGETS_S = {"attention": 0.25, "no attention": 0.15}


class Timing(NamedTuple):
    wall: float
    cpu: float  # user + system of the process: what the machine's load does not stretch


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> Timing:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return Timing(wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def row(label: str, tool: str, runs: list[Timing], baseline: list[Timing] | None = None, target: float = 0) -> str:
    best, cpu = min(t.wall for t in runs), min(t.cpu for t in runs)
    text = f"{label:<14}{tool:<11}{best:>8.3f}{statistics.median(t.wall for t in runs):>10.3f}{cpu:>9.3f}"
    if baseline:
        text += f"{best / min(t.wall for t in baseline):>9.1f}x{cpu / min(t.cpu for t in baseline):>8.1f}x"
        text += f"{target:>8.2f} {'ok' if best < target else 'MISSED'}"
    return text


def main(runs: int) -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        sys.exit("ruff is not installed (pip install -e '.[dev]')")
    attncheck = [sys.executable, "-m", "attncheck", "--static-only", "--no-cache", "--output-format", "concise"]
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        shutil.copy(ATTENTION, folder / "attention.py")
        (folder / "plain.py").write_text(PLAIN)
        env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        env |= {"PYTHONPYCACHEPREFIX": str(folder / "pycache"), "PYTHONPATH": str(ROOT)}
        for name in ("attention.py", "plain.py"):
            timed([*attncheck, name], folder, env)  # writes the bytecode
        print(f"{'file':<14}{'tool':<11}{'best s':>8}{'median s':>10}{'cpu s':>9}"
              f"{'wall/ruff':>10}{'cpu/ruff':>9}{'target':>8}")
        print(row("-", "python", [timed([sys.executable, "-c", "pass"], folder, env) for _ in range(runs)]))
        floor = [sys.executable, "-c", "import libcst, click"]
        print(row("-", "imports", [timed(floor, folder, env) for _ in range(runs)]))
        for label, name in (("attention", "attention.py"), ("no attention", "plain.py")):
            ours, theirs = [], []
            for _ in range(runs):
                ours.append(timed([*attncheck, name], folder, env))
                theirs.append(timed([ruff, "check", "--no-cache", "--quiet", name], folder, env))
            print(row(label, "ruff", theirs))
            print(row(label, "attncheck", ours, theirs, TARGETS_S[label]))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
