"""Byte-for-byte behaviour check: attncheck's reports on a fixed set of inputs, recorded and compared.

A change that must not change behaviour (a module moved, a class split, a speed-up) is checked by
recording the reports before it and comparing after::

    python bench/golden.py record /tmp/before.json            # on the commit before the change
    python bench/golden.py compare /tmp/before.json           # on the change; exit 1 on any difference

Each case is one attncheck command run from the repository root: its exit code, standard output
and the last lines of standard error are kept. The cases cover every fixture and seed in the
static and text modes, the default (dynamic) mode over ``fixtures/correct``, ``buggy`` and
``seeds`` (``--dynamic``, about two minutes) and the pinned real-world wheels of
``bench/corpus.py`` (``--realworld``, downloaded once into ``bench/.cache``).
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
# The pinned wheels are unpacked under each checkout's bench/.cache: reports name them by absolute path, which
# differs between a checkout and its worktrees, so that prefix is compared as a placeholder.
_WHEEL_CACHE = re.compile(r"[^\s\"']*/bench/\.cache/")


def _fixture_files(*folders: str) -> list[str]:
    files: list[str] = []
    for folder in folders:
        files += sorted(str(p.relative_to(ROOT)) for p in (ROOT / folder).rglob("*") if p.suffix in {".py", ".ipynb"})
    return files


def cases(dynamic: bool, realworld: bool) -> dict[str, list[str]]:
    """Name -> attncheck arguments; the names are stable keys of the recording."""
    static = ["--static-only", "--no-cache"]
    found: dict[str, list[str]] = {}
    for path in _fixture_files("fixtures/correct", "fixtures/buggy", "fixtures/seeds"):
        found[f"static-json {path}"] = [*static, "--format", "json", path]
    for folder in ("fixtures/correct", "fixtures/buggy", "fixtures/seeds"):
        files = _fixture_files(folder)
        found[f"static-text {folder}"] = [*static, "--no-color", *files]
        found[f"static-sarif {folder}"] = [*static, "--format", "sarif", *files]
        found[f"static-diff {folder}"] = [*static, "--diff", *files]
    if dynamic:
        for folder in ("fixtures/correct", "fixtures/buggy", "fixtures/seeds"):
            found[f"dynamic-json {folder}"] = ["--no-cache", "--format", "json", *_fixture_files(folder)]
    if realworld:
        from corpus import VERSIONS, unpacked

        for package in VERSIONS:
            root = unpacked(package)
            found[f"realworld {package}"] = [*static, "--format", "json", "--exit-zero", str(root)]
    return found


def run(arguments: list[str]) -> dict[str, object]:
    completed = subprocess.run(
        [sys.executable, "-m", "attncheck", *arguments], cwd=ROOT, capture_output=True, text=True, check=False,
    )
    return {"rc": completed.returncode, "stdout": _WHEEL_CACHE.sub("<cache>/", completed.stdout),
            "stderr_tail": completed.stderr.splitlines()[-3:]}


def record(path: Path, dynamic: bool, realworld: bool) -> None:
    results = {name: run(arguments) for name, arguments in cases(dynamic, realworld).items()}
    path.write_text(json.dumps(results, indent=1, sort_keys=True))
    print(f"recorded {len(results)} cases in {path}")


def compare(path: Path) -> int:
    recorded: dict[str, dict[str, object]] = json.loads(path.read_text())
    dynamic = any(name.startswith("dynamic") for name in recorded)
    realworld = any(name.startswith("realworld") for name in recorded)
    current = cases(dynamic, realworld)
    differing = 0
    for name in sorted(set(recorded) | set(current)):
        if name not in current or name not in recorded:
            print(f"CASE SET DIFFERS: {name} is {'gone' if name not in current else 'new'}")
            differing += 1
            continue
        now, before = run(current[name]), recorded[name]
        before["stdout"] = _WHEEL_CACHE.sub("<cache>/", str(before["stdout"]))
        if now == before:
            continue
        differing += 1
        print(f"DIFFERS: {name} (exit {before['rc']} -> {now['rc']})")
        diff = difflib.unified_diff(str(before["stdout"]).splitlines(), str(now["stdout"]).splitlines(),
                                    "before", "now", lineterm="", n=1)
        print("\n".join(list(diff)[:40]))
        if before["stderr_tail"] != now["stderr_tail"]:
            print(f"  stderr before: {before['stderr_tail']}\n  stderr now:    {now['stderr_tail']}")
    print(f"{len(recorded)} cases, {differing} differ")
    return 1 if differing else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("record", "compare"))
    parser.add_argument("file", type=Path, help="the recording (JSON)")
    parser.add_argument("--dynamic", action="store_true", help="record the default (dynamic) mode too")
    parser.add_argument("--realworld", action="store_true", help="record the pinned real-world wheels too")
    args = parser.parse_args()
    if args.action == "record":
        record(args.file, args.dynamic, args.realworld)
    else:
        raise SystemExit(compare(args.file))


if __name__ == "__main__":
    main()
