"""The dynamic mode of ``bench/realworld.py``: attncheck's default mode over the attention code of
the pinned wheels, imported as the installed packages they are.

The packages must be installed (at the versions of ``corpus.VERSIONS``) in the environment that
runs attncheck; they are not attncheck's dependencies. Files are chosen from each installed
package: those that define something named like attention and compute a softmax (not
transformers' ``modular_*.py`` templates, which generate the modeling files and are not meant to
be imported), every k-th in path order so that the choice spreads over the package and stays the
same from run to run, at most ``limit`` per package. Each target ends executed (passed or
failed), skipped (with a reason) or in an error; the report counts them, groups the skips and
errors by reason, and lists every failure and error, which on this released code must each be
read as a possible false error.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from corpus import VERSIONS

MODULES = {"transformers": "transformers", "timm": "timm", "diffusers": "diffusers", "x-transformers": "x_transformers"}
SOFTMAX = re.compile(rb"softmax|scaled_dot_product_attention")
ATTENTION = re.compile(rb"^\s*(?:class \w*att\w*\(|def \w*att\w*\()", re.IGNORECASE | re.MULTILINE)


@dataclass
class Tally:
    """The targets of one package by how they ended."""

    files: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    each: list[str] = field(default_factory=list)  # every target: where, status, codes or reason

    @property
    def targets(self) -> int:
        return sum(self.statuses.values())

    @property
    def executed(self) -> int:
        return self.statuses["passed"] + self.statuses["failed"]

    def add(self, other: Tally) -> None:
        self.files += other.files
        self.statuses.update(other.statuses)
        self.skipped.update(other.skipped)
        self.errors.update(other.errors)
        self.failures += other.failures
        self.each += other.each


def installed_root(package: str) -> Path:
    """The installed package folder, after checking that its version is the pinned one."""
    version = importlib.metadata.version(package)
    if version != VERSIONS[package]:
        raise SystemExit(f"{package} {version} is installed; the bench pins {VERSIONS[package]}")
    spec = importlib.util.find_spec(MODULES[package])
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{package} is not installed: pip install {package}=={VERSIONS[package]}")
    return Path(next(iter(spec.submodule_search_locations)))


def chosen_files(root: Path, limit: int) -> list[Path]:
    """At most ``limit`` files of ``root`` that compute attention, spread evenly in path order."""
    files = [p for p in sorted(root.rglob("*.py")) if not p.name.startswith("modular_") and _attention(p.read_bytes())]
    step = max(1, -(-len(files) // limit))
    return files[::step][:limit]


def _attention(text: bytes) -> bool:
    """Whether a file defines something named like attention and computes a softmax."""
    return bool(ATTENTION.search(text) and SOFTMAX.search(text))


def run(files: list[Path], timeout: float, jobs: int) -> dict:
    """attncheck in its default mode over ``files``, its JSON report."""
    completed = subprocess.run(
        [sys.executable, "-m", "attncheck", "--format", "json", "--exit-zero", "--no-cache",
         "--timeout", str(timeout), "--jobs", str(jobs), *map(str, files)],
        capture_output=True, text=True, check=False,
    )
    if completed.returncode != 0:
        raise SystemExit(f"attncheck failed:\n{completed.stderr[-2000:]}")
    return json.loads(completed.stdout)


def tally(report: dict, root: Path, files: int) -> Tally:
    """Count the targets of ``report`` by status and reason, and list what failed."""
    found = Tally(files=files)
    for target in report["targets"]:
        status, reason = target["status"], target.get("reason") or ""
        found.statuses[status] += 1
        where = f"{Path(target['path']).relative_to(root.parent)}:{target['line']} {target['name']}"
        codes = sorted({f["code"] for f in report["findings"] if f["source"] != "static"
                        and f.get("target") == target["name"] and f["path"] == target["path"]})
        found.each.append(f"{status:<8}{where}: {', '.join(codes) or reason[:240]}")
        if status == "skipped":
            found.skipped[_kind(reason)] += 1
        elif status == "error":
            found.errors[_kind(reason)] += 1
            found.failures.append(f"error   {where}: {reason[:200]}")
        elif status == "failed":
            found.failures.append(f"failed  {where}: {', '.join(codes) or 'no finding'}")
    return found


def _kind(reason: str) -> str:
    """A reason without its particulars, to group targets that ended the same way."""
    head = reason.split(";")[0]
    head = re.sub(r"\(line \d+\)|line \d+", "line N", head)
    head = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", head)
    return head[:110]


def print_tally(name: str, found: Tally, seconds: float | None = None) -> None:
    share = 100 * found.executed / found.targets if found.targets else 0.0
    took = f" in {seconds:.0f} s" if seconds is not None else ""
    print(f"== {name}: {found.files} files, {found.targets} targets{took}: {found.executed} executed ({share:.0f} %: "
          f"{found.statuses['passed']} passed, {found.statuses['failed']} failed), "
          f"{found.statuses['skipped']} skipped, {found.statuses['error']} errors")
    for title, counts in (("skipped", found.skipped), ("error", found.errors)):
        for reason, count in counts.most_common():
            print(f"   {title:<7} {count:>3}  {reason}")


# Issue 23's families, each checked in place in its own modeling file: (model folder, attention class).
FAMILIES = (
    ("llama", "LlamaAttention"), ("mistral", "MistralAttention"), ("gemma2", "Gemma2Attention"),
    ("qwen3", "Qwen3Attention"), ("bloom", "BloomAttention"), ("falcon", "FalconAttention"),
    ("t5", "T5Attention"), ("gpt_neo", "GPTNeoSelfAttention"), ("gpt_oss", "GptOssAttention"),
)  # fmt: skip


def families(timeout: float, jobs: int) -> None:
    """Each family's attention class of the installed transformers: its status, and why when not passed."""
    models = installed_root("transformers") / "models"
    start = time.monotonic()
    report = run([models / folder / f"modeling_{folder}.py" for folder, _ in FAMILIES], timeout, jobs)
    print(f"== transformers attention classes in place (issue 23), in {time.monotonic() - start:.0f} s")
    for _, name in FAMILIES:
        target = next((t for t in report["targets"] if t["name"] == name), None)
        if target is None:
            print(f"   {name:<22} not found as a target")
            continue
        codes = sorted({f["code"] for f in report["findings"] if f["source"] != "static" and f.get("target") == name})
        why = ", ".join(codes) if target["status"] == "failed" else (target.get("reason") or "")[:150]
        print(f"   {name:<22} {target['status']:<8} {why}")


def main(
    limit: int, timeout: float, jobs: int, packages: tuple[str, ...] = tuple(VERSIONS), each: bool = False
) -> None:
    total = Tally()
    for package in packages:
        root = installed_root(package)
        files = chosen_files(root, limit)
        start = time.monotonic()
        found = tally(run(files, timeout, jobs), root, len(files))
        print_tally(f"{package} {VERSIONS[package]}", found, time.monotonic() - start)
        total.add(found)
    print_tally("total", total)
    for line in total.each if each else total.failures:
        print(f"   {line}")
    if "transformers" in packages:
        families(timeout, jobs)
