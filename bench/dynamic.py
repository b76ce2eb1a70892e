"""Time the dynamic check of each correct fixture through the real sandbox.

For every file: the wall time of an empty request (process start, ``import
torch``, importing the user's module: the fixed cost of a child) and of the
full check of its targets; the share of the full check spent starting the child.

Run from the repository root: ``python bench/dynamic.py [--repeat N]``.
``--diagnosis`` instead times, per buggy fixture, what naming the mistake adds:
the in-process check with the mutant diagnosis and without it (the diagnosis
replaced by "nothing explains it"), so the difference is the parent's search.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from attncheck.dynamic.runner import check_file, sandbox_child  # noqa: E402
from tests.dynamic_support import FIXTURES, Options, file_result  # noqa: E402


def best_of(repeat: int, action) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return min(times) if repeat < 3 else statistics.median(times)


def diagnosis_cost(repeat: int) -> None:
    """Per buggy fixture: check time with and without the diagnosis, and the codes it names."""
    from unittest import mock

    from attncheck.dynamic import explain
    from attncheck.sources import Source
    from attncheck.static.engine import lint
    from attncheck.static.rules import all_rules
    from tests.dynamic_support import in_process_child

    options = Options()
    print(f"{'fixture':34} {'with ms':>8} {'without ms':>10} {'added ms':>8}  codes")
    added = []
    for path in sorted((FIXTURES / "buggy").glob("*.py")) + sorted((FIXTURES / "seeds").glob("*.py")):
        result = lint(Source(str(path), path.read_text()), all_rules())
        if not result.targets:
            continue
        check_file(result, options, in_process_child)  # import the fixture once, outside the timing
        with_ = best_of(repeat, lambda r=result: check_file(r, options, in_process_child))
        with mock.patch.object(explain, "diagnose_judge", lambda *_a, **_k: None):
            without = best_of(repeat, lambda r=result: check_file(r, options, in_process_child))
        codes = sorted({f.code for f in check_file(result, options, in_process_child)[0]})
        added.append((with_ - without) * 1000)
        print(f"{path.stem:34} {with_ * 1000:>8.0f} {without * 1000:>10.0f} {added[-1]:>8.0f}  {','.join(codes)}")
    print(f"diagnosis adds {statistics.median(added):.0f} ms per file (median), {max(added):.0f} ms at most")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--diagnosis", action="store_true", help="time the mutant diagnosis per buggy fixture")
    args = parser.parse_args()
    if args.diagnosis:
        diagnosis_cost(args.repeat)
        return
    options = Options()
    child = sandbox_child(options)
    print(f"{'fixture':28} {'targets':>7} {'start s':>8} {'full s':>7} {'start share':>11}")
    fulls = []
    for path in sorted((FIXTURES / "correct").glob("dyn_*.py")):
        result = file_result(path)
        start = best_of(args.repeat, lambda p=path: child(p, {"seed": 0, "device": "cpu", "targets": []}, {}))
        full = best_of(args.repeat, lambda r=result: check_file(r, options, child))
        statuses = {t.status for t in check_file(result, options, child)[1]}
        fulls.append(full)
        row = f"{path.stem:28} {len(result.targets):>7} {start:>8.2f} {full:>7.2f} {start / full:>10.0%}"
        print(f"{row}  {statuses}")
    print(f"median full check per file: {statistics.median(fulls):.2f} s (target: under 3 s)")


if __name__ == "__main__":
    main()
