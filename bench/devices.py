"""Compare the dynamic verdicts on the CPU and on a CUDA GPU, fixture by fixture.

The dynamic check promises the same verdict wherever it runs: the reference and the judging are
float64 on either device, and only the low-precision probes (float16/bfloat16) reach kernels that
exist on the GPU alone (SDPA's flash and memory-efficient backends, tensor-core matrix products).
This script runs ``python -m attncheck PATHS --format json`` once per device on the same machine
and prints every target whose status, check statuses or findings differ, with the wall time of
each run. CI has no GPU; run it where one is lent (``bench/devices.py --out DIR``), and without
a GPU it says so and compares nothing.

Run from the repository root: ``python bench/devices.py [PATHS...] [--jobs N] [--out DIR]``
(default paths: ``fixtures/correct fixtures/buggy``). Exit status 1 when the devices disagree.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PATHS = ("fixtures/correct", "fixtures/buggy")
SERIOUS = {"warning", "error"}


def run_attncheck(paths: list[str], device: str, jobs: int, extra: list[str]) -> tuple[dict, float]:
    """One whole command on one device: its JSON report and wall seconds."""
    # --isolated: the repository's own configuration excludes the buggy fixtures
    command = [sys.executable, "-m", "attncheck", "check", *paths, "--format", "json", "--device", device,
               "--jobs", str(jobs), "--no-cache", "--isolated", *extra]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if not done.stdout.strip():
        sys.exit(f"attncheck --device {device} printed no report (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout), seconds


def verdicts(report: dict) -> dict[tuple, dict]:
    """Per target: its status, each check's status, and the serious findings on its file."""
    serious: dict[str, set] = {}
    for finding in report["findings"]:
        if finding.get("severity") in SERIOUS:
            serious.setdefault(finding["path"], set()).add((finding["line"], finding["code"]))
    return {
        (t["path"], t["name"], t["line"]): {
            "status": t["status"],
            "device": t.get("device"),
            "checks": {c["name"]: c["status"] for c in t.get("checks", [])},
            "findings": sorted(serious.get(t["path"], ())),
            "reason": t.get("reason", ""),
        }
        for t in report["targets"]
    }


def differences(cpu: dict[tuple, dict], gpu: dict[tuple, dict]) -> list[str]:
    """One line per target whose verdict differs between the devices."""
    lines = []
    for key in sorted(set(cpu) | set(gpu)):
        a, b = cpu.get(key), gpu.get(key)
        where = f"{key[0]}:{key[2]} {key[1]}"
        if a is None or b is None:
            lines.append(f"{where}: only on {'cuda' if a is None else 'cpu'}")
            continue
        if a["status"] != b["status"]:
            lines.append(f"{where}: status cpu={a['status']} cuda={b['status']} ({b['reason'][:160]})")
        for name in sorted(set(a["checks"]) | set(b["checks"])):
            if a["checks"].get(name) != b["checks"].get(name):
                lines.append(f"{where}: check {name} cpu={a['checks'].get(name)} cuda={b['checks'].get(name)}")
        if a["findings"] != b["findings"]:
            lines.append(f"{where}: findings cpu={a['findings']} cuda={b['findings']}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", default=list(DEFAULT_PATHS))
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--out", type=Path, help="folder for the two JSON reports and the differences")
    parser.add_argument("--unsafe-no-sandbox", action="store_true", help="passed on to attncheck")
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("bench-devices: no CUDA GPU here; nothing to compare")
        return 0
    extra = ["--unsafe-no-sandbox"] if args.unsafe_no_sandbox else []
    cpu_report, cpu_s = run_attncheck(args.paths, "cpu", args.jobs, extra)
    gpu_report, gpu_s = run_attncheck(args.paths, "cuda", args.jobs, extra)
    cpu, gpu = verdicts(cpu_report), verdicts(gpu_report)
    on_gpu = sum(1 for v in gpu.values() if v["device"] == "cuda")
    lines = differences(cpu, gpu)
    print(f"bench-devices: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    print(f"bench-devices: {len(cpu)} targets; {on_gpu} ran on cuda; wall cpu {cpu_s:.1f} s, cuda {gpu_s:.1f} s "
          f"(ratio {gpu_s / cpu_s:.2f})")
    print(f"bench-devices: {len(lines)} differences")
    for line in lines:
        print("  " + line)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cpu.json").write_text(json.dumps(cpu_report, indent=1))
        (args.out / "cuda.json").write_text(json.dumps(gpu_report, indent=1))
        (args.out / "differences.txt").write_text("\n".join(lines) + "\n")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
