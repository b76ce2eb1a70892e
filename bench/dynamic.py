"""Time the dynamic check: per file and per target, and the share spent starting the child.

Part 1, per fixture through the real sandbox (parent already warm): the child's start-up (launch
until it is ready: Python, ``import torch``, the executor), the full check of the file, the time
per target, and the share of the full check that is start-up. The same check with the in-process
stand-in child shows what the experiments and the judging cost on their own.

Part 2, the whole command on a typical module, each run a fresh interpreter, the two orders
alternated so that the machine's load hits both alike:
  overlapped  ``python -m attncheck FILE``: the child starts before the parent imports torch;
  sequential  the same stages with the parent's ``import torch`` first, then the child (the old order).

Run from the repository root: ``python bench/dynamic.py [--repeat N] [--file PATH]``.
``--diagnosis`` instead times, per buggy fixture, what naming the mistake adds:
the in-process check with the mutant diagnosis and without it (the diagnosis
replaced by "nothing explains it"), so the difference is the parent's search.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TYPICAL = ROOT / "fixtures" / "correct" / "dyn_self_attention.py"


def sequential(path: Path) -> None:
    """The old order, for part 2: parent imports torch, then starts the child, then checks."""
    from attncheck import pipeline
    from attncheck.config import Settings
    from attncheck.discovery import Candidate

    settings = Settings(root=ROOT)
    results = list(pipeline.lint_all([Candidate(path, str(path), True)], pipeline.enabled_codes(settings), 1))
    from attncheck.dynamic import runner  # imports torch before any child exists

    options = settings.dynamic_options(1)
    runner.run_dynamic(results, options, runner.sandbox_child(options))


def median_of(repeat: int, action) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def per_file(repeat: int) -> None:
    from attncheck.dynamic.runner import check_file, sandbox_child
    from attncheck.dynamic.sandbox import Limits, run_child
    from tests.dynamic_support import FIXTURES, Options, file_result, in_process_child

    options = Options(device="cpu")
    child = sandbox_child(options)
    columns = ("targets", 7), ("start s", 8), ("full s", 7), ("per target", 10), ("start share", 11), ("in-proc s", 9)
    print(f"{'fixture':30} " + " ".join(f"{name:>{width}}" for name, width in columns))
    shares = []
    paths = [*sorted((FIXTURES / "correct").glob("dyn_*.py")), FIXTURES / "seeds" / "seed004_attention.py"]
    for path in paths:
        result = file_result(path)
        starts = [
            run_child(path, {"seed": 0, "device": "cpu", "targets": []}, {}, Limits()).start_s or 0.0
            for _ in range(repeat)
        ]
        start = statistics.median(starts)
        full = median_of(repeat, lambda r=result: check_file(r, options, child))
        local = median_of(repeat, lambda r=result: check_file(r, options, in_process_child))
        targets = len(result.targets)
        shares.append(start / full)
        print(
            f"{path.stem:30} {targets:>7} {start:>8.2f} {full:>7.2f} {full / targets:>10.2f} "
            f"{start / full:>10.0%} {local:>9.3f}"
        )
    print(f"median start share: {statistics.median(shares):.0%}")


def whole_command(repeat: int, path: Path) -> None:
    commands = {
        "overlapped": [sys.executable, "-m", "attncheck", str(path), "--device", "cpu"],
        "sequential": [sys.executable, str(Path(__file__).resolve()), "--sequential", str(path)],
        "static-only": [sys.executable, "-m", "attncheck", str(path), "--static-only"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeat):
        for name, command in commands.items():
            start = time.perf_counter()
            subprocess.run(command, cwd=ROOT, capture_output=True, check=False)
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, value in medians.items():
        print(f"{name:12} median {value:6.2f} s  (runs: {', '.join(f'{t:.2f}' for t in times[name])})")
    print(f"overlapped / sequential: {medians['overlapped'] / medians['sequential']:.2f}")


def diagnosis_cost(repeat: int) -> None:
    """Per buggy fixture: check time with and without the diagnosis, and the codes it names."""
    from unittest import mock

    from attncheck.dynamic import explain
    from attncheck.dynamic.runner import check_file
    from attncheck.sources import Source
    from attncheck.static.engine import lint
    from attncheck.static.rules import all_rules
    from tests.dynamic_support import FIXTURES, Options, in_process_child

    options = Options()
    print(f"{'fixture':34} {'with ms':>8} {'without ms':>10} {'added ms':>8}  codes")
    added = []
    for path in sorted((FIXTURES / "buggy").glob("*.py")) + sorted((FIXTURES / "seeds").glob("*.py")):
        result = lint(Source(str(path), path.read_text()), all_rules())
        if not result.targets:
            continue
        check_file(result, options, in_process_child)  # import the fixture once, outside the timing
        with_ = median_of(repeat, lambda r=result: check_file(r, options, in_process_child))
        with mock.patch.object(explain, "diagnose_judge", lambda *_a, **_k: None):
            without = median_of(repeat, lambda r=result: check_file(r, options, in_process_child))
        codes = sorted({f.code for f in check_file(result, options, in_process_child)[0]})
        added.append((with_ - without) * 1000)
        print(f"{path.stem:34} {with_ * 1000:>8.0f} {without * 1000:>10.0f} {added[-1]:>8.0f}  {','.join(codes)}")
    print(f"diagnosis adds {statistics.median(added):.0f} ms per file (median), {max(added):.0f} ms at most")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--file", type=Path, default=TYPICAL)
    parser.add_argument("--sequential", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--part", choices=("1", "2", "both"), default="both")
    parser.add_argument("--diagnosis", action="store_true", help="time the mutant diagnosis per buggy fixture")
    args = parser.parse_args()
    if args.sequential:
        sequential(args.sequential.resolve())
        return
    if args.diagnosis:
        diagnosis_cost(args.repeat)
        return
    if args.part in ("1", "both"):
        per_file(args.repeat)
    if args.part in ("2", "both"):
        whole_command(args.repeat, args.file.resolve())


if __name__ == "__main__":
    main()
