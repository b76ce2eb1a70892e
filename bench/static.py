"""Static speed: attncheck --static-only against ruff on the transformers modeling tree.

Both tools run side by side in one process of this script, alternating, on the
same files (about 540 files, 570k lines): ruff with ``--no-cache --select ALL``,
attncheck cold (an empty cache directory) and warm (the cache of the previous
run), attncheck started from its bytecode, as an installed one is (``byte_compile``).
Prints the median wall time of each and the ratios, which are what to compare across
machines. Usage: ``python bench/static.py [--repeat 3]``.
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    files = [str(path) for path in transformers_modeling_files()]
    byte_compile(Path(__file__).resolve().parent.parent)
    lines = sum(Path(f).read_text(encoding="utf-8").count("\n") for f in files)
    print(f"{len(files)} files, {lines} lines, {os.cpu_count()} cores")
    ruff = shutil.which("ruff") or sys.exit("ruff is not installed (pip install ruff)")
    ruff_cmd = [ruff, "check", "--no-cache", "--select", "ALL", "--exit-zero", "--quiet", *files]
    ours = [sys.executable, "-m", "attncheck", "--static-only", "--exit-zero", "--format", "json", *files]
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
