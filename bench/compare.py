"""A change's static speed against a baseline checkout, side by side.

Runs ``attncheck --static-only`` cold (an empty cache) over the transformers
modeling tree from two source trees, this one and ``BASELINE`` (for example a
``git worktree add`` of an older commit), alternating which goes first, and prints
the median wall time and CPU time (user and system, every process of the run) of
each, and their ratios. On a machine whose speed drifts, runs taken side by side
are what compare; the CPU ratio is the steadier of the two.
Usage: ``python bench/compare.py BASELINE [--repeat 6]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import byte_compile, transformers_modeling_files
from static import timed

HERE = Path(__file__).resolve().parent.parent


def cold_run(source_tree: Path, files: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one cold static run of the attncheck in ``source_tree``."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "ATTNCHECK_CACHE_DIR": cache, "PYTHONPATH": str(source_tree)}
        command = [sys.executable, "-m", "attncheck", "--static-only", "--exit-zero", "--format", "json", *files]
        return timed(command, env, cwd=tempfile.gettempdir())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline", type=Path, help="the source tree of the attncheck to compare with")
    parser.add_argument("--repeat", type=int, default=6)
    args = parser.parse_args()
    files = [str(path) for path in transformers_modeling_files()]
    trees = {"baseline": args.baseline.resolve(), "this": HERE}
    for tree in trees.values():
        byte_compile(tree)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    for repeat in range(args.repeat):
        order = list(trees) if repeat % 2 == 0 else list(reversed(trees))
        for name in order:
            times[name].append(cold_run(trees[name], files))
    medians = {name: (statistics.median(w for w, _ in found), statistics.median(c for _, c in found))
               for name, found in times.items()}
    for name, (wall, cpu) in medians.items():
        print(f"{name:9} {trees[name]!s:40} wall {wall:6.2f} s   cpu {cpu:6.2f} s")
    (base_wall, base_cpu), (wall, cpu) = medians["baseline"], medians["this"]
    print(f"this/baseline: wall {wall / base_wall:.3f}   cpu {cpu / base_cpu:.3f}")


if __name__ == "__main__":
    main()
