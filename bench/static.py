"""Static speed: attncheck --static-only against ruff on the transformers modeling tree.

Both tools run side by side in one process of this script, alternating, on the
same files (about 540 files, 570k lines): ruff with ``--no-cache --select ALL``,
attncheck cold (an empty cache directory) and warm (the cache of the previous
run), attncheck started from its bytecode, as an installed one is (``byte_compile``).
Prints the median wall time of each and the ratios, which are what to compare across
machines. Usage: ``python bench/static.py [--repeat 3]``.

``--per-rule`` instead runs attncheck once, cold, with ``ATTNCHECK_RULE_TIMES`` set
(``attncheck/static/rule_timing.py``), and prints the seconds spent in each rule's
visitor methods over the whole tree, slowest first.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import byte_compile, transformers_modeling_files


def timed(command: Sequence[str], env: dict[str, str] | None = None, cwd: str | None = None) -> tuple[float, float]:
    """Wall and CPU seconds (user and system, every process it starts) of one run of ``command``;
    exit codes 0 and 1 (findings) are success."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, env=env, cwd=cwd, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode not in (0, 1):
        raise SystemExit(f"{command[0]} failed ({completed.returncode}):\n{completed.stderr.decode()[-2000:]}")
    return elapsed, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def per_rule(command: Sequence[str]) -> None:
    """One cold run of ``command`` with the per-rule timer on; prints each rule's seconds, slowest first."""
    totals: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as scratch:
        times_file = Path(scratch, "rule-times.jsonl")
        env = {**os.environ, "ATTNCHECK_CACHE_DIR": str(Path(scratch, "cache")),
               "ATTNCHECK_RULE_TIMES": str(times_file)}
        wall, cpu = timed(command, env)
        for line in times_file.read_text(encoding="utf-8").splitlines():
            for code, seconds in json.loads(line)["seconds"].items():
                totals[code] = totals.get(code, 0.0) + seconds
    in_rules = sum(totals.values())
    print(f"one cold run: {wall:.2f} s wall, {cpu:.2f} s CPU, {in_rules:.2f} s in rule visitors")
    for code, seconds in sorted(totals.items(), key=lambda item: -item[1]):
        print(f"{code}  {seconds:7.3f} s  {100 * seconds / in_rules if in_rules else 0.0:5.1f} %")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--per-rule", action="store_true", help="time each rule in one cold run instead")
    args = parser.parse_args()
    files = [str(path) for path in transformers_modeling_files()]
    byte_compile(Path(__file__).resolve().parent.parent)
    ours = [sys.executable, "-m", "attncheck", "--static-only", "--exit-zero", "--format", "json", *files]
    if args.per_rule:
        per_rule(ours)
        return
    lines = sum(Path(f).read_text(encoding="utf-8").count("\n") for f in files)
    print(f"{len(files)} files, {lines} lines, {os.cpu_count()} cores")
    ruff = shutil.which("ruff") or sys.exit("ruff is not installed (pip install ruff)")
    ruff_cmd = [ruff, "check", "--no-cache", "--select", "ALL", "--exit-zero", "--quiet", *files]
    ruff_times, cold_times, warm_times = [], [], []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "ATTNCHECK_CACHE_DIR": cache}
            ruff_times.append(timed(ruff_cmd)[0])
            cold_times.append(timed(ours, env)[0])
            warm_times.append(timed(ours, env)[0])
    ruff_s, cold_s, warm_s = (statistics.median(t) for t in (ruff_times, cold_times, warm_times))
    print(f"ruff --select ALL   {ruff_s:7.2f} s")
    print(f"attncheck cold      {cold_s:7.2f} s   ratio to ruff {cold_s / ruff_s:.2f}")
    print(f"attncheck warm      {warm_s:7.2f} s   ratio to ruff {warm_s / ruff_s:.2f}")
    # Each repeat times ruff and attncheck back to back, so their ratio is less moved by a
    # machine whose speed drifts from one minute to the next than the ratio of the medians.
    paired = sorted(c / r for c, r in zip(cold_times, ruff_times, strict=True))
    print(f"cold/ruff per repeat: median {statistics.median(paired):.2f} (from {paired[0]:.2f} to {paired[-1]:.2f})")


if __name__ == "__main__":
    main()
