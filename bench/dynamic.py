"""Time the dynamic check: per target, and the whole command, with the share spent starting the child.

Part 1, per fixture through the real sandbox (parent already warm), per target: the child's start
(launch until ready: bubblewrap, Python, ``import torch``, the executor), the experiments in the
child (from the child's own clock, carried in its facts), the parent's judging and diagnosis, and
the share of the file's check that is start-up.

Part 2, the whole command ``python -m attncheck FILE`` on a typical module, each run a fresh
interpreter: wall time, the parent's CPU time and the child's (the child reports its own, since a
bubblewrap grandchild's CPU never reaches the parent's rusage), and the moment the child was
ready. ``--against DIR`` runs another checkout's attncheck (e.g. ``git worktree add /tmp/main
main``) alternately with this one, so that the machine's load hits both alike, and prints the
ratios, which are what compare across machines. ``--static-only`` is timed too.

Run from the repository root: ``python bench/dynamic.py [--part 1|2|both] [--repeat N] [--file PATH]
[--against DIR]``. ``--diagnosis`` instead times, per buggy fixture, what naming the mistake adds:
the in-process check with the mutant diagnosis and without it (the diagnosis replaced by
"nothing explains it"), so the difference is the parent's search.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TYPICAL = ROOT / "fixtures" / "correct" / "dyn_self_attention.py"
SEED004 = ROOT / "fixtures" / "seeds" / "seed004_attention.py"
TARGET_WALL_S = 3.0  # issue 3: a typical module's full dynamic check, process start included
TARGET_WALL_PROBES_S = 5.0  # issue 4: the same with the GQA/RoPE/low-precision probes and the diagnosis
REPORT_PREFIX = "bench-dynamic: "


def median_of(repeat: int, action) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# ------------------------------------------------------------------ part 1: per target


def per_target(repeat: int) -> None:
    from attncheck.dynamic import runner
    from tests.dynamic_support import FIXTURES, Options, file_result

    options = Options(device="cpu")
    child = runner.sandbox_child(options)
    seen: dict[str, list] = {"start": [], "experiments": [], "judge": []}
    real_child, real_judge = child, runner.judge

    def timed_child(path, request, tensors):
        outcome = real_child(path, request, tensors)
        seen["start"].append(outcome.start_s or 0.0)
        seen["experiments"] += [r.facts.get("timing", {}).get("experiments_s", 0.0) for r in outcome.replies]
        return outcome

    def timed_judge(*args, **kwargs):
        start = time.perf_counter()
        answer = real_judge(*args, **kwargs)
        seen["judge"].append(time.perf_counter() - start)
        return answer

    runner.judge = timed_judge
    header = ("targets", "start s", "experiments s", "judging s", "full s", "start share")
    print(f"{'fixture':30} " + " ".join(f"{name:>13}" for name in header))
    shares = []
    paths = [*sorted((FIXTURES / "correct").glob("dyn_*.py")), SEED004]
    try:
        for path in paths:
            result = file_result(path)
            rows = []
            for _ in range(repeat):
                for values in seen.values():
                    values.clear()
                start = time.perf_counter()
                runner.check_file(result, options, timed_child)
                full = time.perf_counter() - start
                rows.append((sum(seen["start"]), sum(seen["experiments"]), sum(seen["judge"]), full))
            start_s, experiments, judging, full = (statistics.median(column) for column in zip(*rows, strict=True))
            targets = len(result.targets)
            shares.append(start_s / full)
            print(
                f"{path.stem:30} {targets:>13} {start_s:>13.2f} {experiments / targets:>13.3f} "
                f"{judging / targets:>13.3f} {full:>13.2f} {start_s / full:>13.0%}"
            )
    finally:
        runner.judge = real_judge
    print("experiments and judging are per target; start and full per file (one child per file)")
    print(f"median start share: {statistics.median(shares):.0%}")


# ------------------------------------------------------------------ part 2: the whole command


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``patch(module)`` once ``name`` is imported, without importing it earlier:
    importing the sandbox up front would change what the measured command does first."""

    def __init__(self, name: str, patch) -> None:
        self.name, self.patch = name, patch

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run_module = spec.loader.exec_module

        def exec_module(module) -> None:
            run_module(module)
            self.patch(module)

        spec.loader.exec_module = exec_module
        return spec


def measured_command(arguments: list[str]) -> None:
    """Run ``attncheck ARGUMENTS`` in this interpreter and print one JSON line of timings on
    stderr: wall, the parent's CPU, the child's start, its own CPU and its experiments."""
    started = time.perf_counter()
    child: dict[str, float] = {"start_s": 0.0, "cpu_s": 0.0, "experiments_s": 0.0, "ready_at_s": 0.0}

    def patch(sandbox) -> None:
        run = sandbox.StartedChild.run

        def timed_run(self, *args, **kwargs):
            outcome = run(self, *args, **kwargs)
            timings = [reply.facts.get("timing", {}) for reply in outcome.replies]
            child["start_s"] += outcome.start_s or 0.0
            child["ready_at_s"] = max(child["ready_at_s"], self.started + (outcome.start_s or 0.0) - started_mono)
            child["cpu_s"] += max((t.get("process_cpu_s", 0.0) for t in timings), default=0.0)
            child["experiments_s"] += sum(t.get("experiments_s", 0.0) for t in timings)
            return outcome

        sandbox.StartedChild.run = timed_run

    started_mono = time.monotonic()
    sys.meta_path.insert(0, _AfterImport("attncheck.dynamic.harness.sandbox", patch))
    sys.argv = ["attncheck", *arguments]
    from attncheck.cli import main

    with contextlib.suppress(SystemExit):
        main()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    report = {"wall_s": time.perf_counter() - started, "parent_cpu_s": usage.ru_utime + usage.ru_stime, **child}
    print(REPORT_PREFIX + json.dumps(report), file=sys.stderr)


def _one_run(checkout: Path, arguments: list[str], cache: Path) -> dict[str, float]:
    command = [sys.executable, str(Path(__file__).resolve()), "--measure", str(checkout), "--", *arguments]
    environment = {**os.environ, "ATTNCHECK_CACHE_DIR": str(cache)}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False, env=environment)
    lines = [line for line in done.stderr.splitlines() if line.startswith(REPORT_PREFIX)]
    if not lines:
        raise SystemExit(f"bench: the measured command printed no timings:\n{done.stderr[-2000:]}")
    return json.loads(lines[-1][len(REPORT_PREFIX) :])


def whole_command(repeat: int, path: Path, against: Path | None) -> None:
    dynamic = [str(path), "--device", "cpu"]
    runs: dict[str, tuple[Path, list[str]]] = {"this": (ROOT, [*dynamic, "--no-cache"])}
    if against is not None:
        runs["against"] = (against, [*dynamic, "--no-cache"])
    runs["this, cached"] = (ROOT, dynamic)  # the static result comes from the cache (filled by a first run)
    runs["static-only"] = (ROOT, [str(path), "--static-only", "--no-cache"])
    results: dict[str, list[dict[str, float]]] = {name: [] for name in runs}
    with tempfile.TemporaryDirectory(prefix="attncheck-bench-cache-") as cache:
        _one_run(ROOT, dynamic, Path(cache))
        for _ in range(repeat):
            for name, (checkout, arguments) in runs.items():
                results[name].append(_one_run(checkout, arguments, Path(cache)))
    print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}, {repeat} runs each, medians:")
    columns = ("wall_s", "parent_cpu_s", "cpu_s", "start_s", "ready_at_s", "experiments_s")
    titles = ("wall s", "parent CPU s", "child CPU s", "child start s", "child ready at", "experiments s")
    print(f"{'':14} " + " ".join(f"{title:>14}" for title in titles) + f" {'total CPU s':>14}")
    medians: dict[str, dict[str, float]] = {}
    for name, values in results.items():
        medians[name] = {column: statistics.median(v[column] for v in values) for column in columns}
        total = statistics.median(v["parent_cpu_s"] + v["cpu_s"] for v in values)
        medians[name]["total"] = total
        print(f"{name:14} " + " ".join(f"{medians[name][c]:>14.2f}" for c in columns) + f" {total:>14.2f}")
    this = medians["this"]
    if "against" in medians:
        other = medians["against"]
        print(
            f"this / against: wall {this['wall_s'] / other['wall_s']:.2f}, "
            f"total CPU {this['total'] / other['total']:.2f}"
        )
    start_share = this["start_s"] / this["wall_s"]
    print(f"start share of the wall time: {start_share:.0%}")
    for limit, what in ((TARGET_WALL_S, "issue 3"), (TARGET_WALL_PROBES_S, "issue 4, with probes")):
        verdict = "within" if this["wall_s"] < limit else "over"
        print(f"{what}: {this['wall_s']:.2f} s wall is {verdict} the {limit:g} s target on this machine "
              f"(load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


# ------------------------------------------------------------------ --diagnosis


def diagnosis_cost(repeat: int) -> None:
    """Per buggy fixture: check time with and without the diagnosis, and the codes it names."""
    from unittest import mock

    from attncheck.dynamic.diagnosis import explain
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
    if len(sys.argv) > 2 and sys.argv[1] == "--measure":  # internal: one measured run in a checkout
        checkout = Path(sys.argv[2]).resolve()
        sys.path[0] = str(checkout)
        os.chdir(checkout)
        measured_command(sys.argv[4:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--file", type=Path, default=TYPICAL)
    parser.add_argument("--against", type=Path, help="another checkout to time alternately (e.g. main)")
    parser.add_argument("--part", choices=("1", "2", "both"), default="both")
    parser.add_argument("--diagnosis", action="store_true", help="time the mutant diagnosis per buggy fixture")
    args = parser.parse_args()
    if args.diagnosis:
        diagnosis_cost(args.repeat)
        return
    if args.part in ("1", "both"):
        per_target(args.repeat)
    if args.part in ("2", "both"):
        whole_command(args.repeat, args.file.resolve(), args.against.resolve() if args.against else None)


if __name__ == "__main__":
    main()
