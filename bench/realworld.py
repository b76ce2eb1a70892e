"""Precision on real code: attncheck --static-only over transformers, timm, diffusers
and x-transformers, with the findings counted per code and severity.

Every error-level finding printed here must be a real bug; warnings are listed
for triage. Usage: ``python bench/realworld.py [--show warnings|errors|none]``.

``--dynamic`` runs the default (dynamic) mode instead, over the attention code of the same
packages installed in this environment (``realworld_dynamic``), bounded by ``--limit`` files per
package and ``--timeout`` seconds per target.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import realworld_dynamic
from corpus import VERSIONS, unpacked


def lint(directory: Path) -> dict:
    completed = subprocess.run(
        [sys.executable, "-m", "attncheck", "--static-only", "--format", "json", "--exit-zero",
         str(directory)],
        capture_output=True, text=True, check=False,
    )
    if completed.returncode != 0:
        raise SystemExit(f"attncheck failed on {directory}:\n{completed.stderr[-2000:]}")
    return json.loads(completed.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", choices=("errors", "warnings", "none"), default="errors",
                        help="which findings to list one per line (errors, errors and warnings, none)")
    parser.add_argument("--dynamic", action="store_true",
                        help="the dynamic mode over the installed packages: share executed, skipped, errored")
    parser.add_argument("--limit", type=int, default=12, help="--dynamic: files per package")
    parser.add_argument("--timeout", type=float, default=10.0, help="--dynamic: seconds per target")
    parser.add_argument("--jobs", type=int, default=2, help="--dynamic: files checked at once")
    parser.add_argument("--packages", nargs="+", choices=tuple(VERSIONS), default=tuple(VERSIONS),
                        help="--dynamic: only these packages (timm in an environment whose torchvision imports)")
    parser.add_argument("--each", action="store_true", help="--dynamic: one line per target, with its reason")
    args = parser.parse_args()
    if args.dynamic:
        realworld_dynamic.main(args.limit, args.timeout, args.jobs, args.packages, args.each)
        return
    shown = {"errors": {"error"}, "warnings": {"error", "warning"}, "none": set()}[args.show]
    totals: Counter[tuple[str, str]] = Counter()
    for package in VERSIONS:
        root = unpacked(package)
        report = lint(root)
        counts = Counter((f["code"], f["severity"]) for f in report["findings"])
        totals.update(counts)
        files = len({f["path"] for f in report["findings"]})
        print(f"== {package} {VERSIONS[package]}: {sum(counts.values())} findings in {files} files, "
              f"{len(report['targets'])} attention targets, {len(report.get('errors', []))} unreadable files")
        for (code, severity), count in sorted(counts.items()):
            print(f"   {code} {severity:<8} {count}")
        for finding in report["findings"]:
            if finding["severity"] in shown:
                path = Path(finding["path"]).relative_to(root.parent) if Path(finding["path"]).is_absolute() \
                    else finding["path"]
                print(f"   {path}:{finding['line']}: {finding['code']} [{finding['severity']}] "
                      f"{finding['message']}")
    print("== total")
    for (code, severity), count in sorted(totals.items()):
        print(f"   {code} {severity:<8} {count}")


if __name__ == "__main__":
    main()
