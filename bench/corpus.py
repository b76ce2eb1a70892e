"""Real code nobody here wrote, for the benchmarks: wheels from PyPI, unpacked once.

The wheels are fetched with ``pip download --no-deps`` into ``bench/.cache``
(ignored by git) and unpacked next to them; later runs reuse them. Their versions are
pinned: the triage of every finding (bench/REALWORLD.md) and the speed figures hold for
these versions, and a newer release adds models nobody has read yet.
"""

from __future__ import annotations

import compileall
import subprocess
import sys
import zipfile
from pathlib import Path

CACHE = Path(__file__).resolve().parent / ".cache"
VERSIONS = {"transformers": "5.24.0", "timm": "1.0.31", "diffusers": "0.42.1", "x-transformers": "2.31.10"}


def unpacked(package: str) -> Path:
    """The unpacked top-level package directory of ``package``'s wheel, of its pinned version."""
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    stem, version = package.replace("-", "_"), VERSIONS[package]
    found = sorted(wheels.glob(f"{stem}-{version}-*.whl"))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--quiet", "-d", str(wheels), f"{package}=={version}"],
            check=True,
        )
        found = sorted(wheels.glob(f"{stem}-{version}-*.whl"))
    wheel = found[0]
    target = CACHE / "src" / wheel.stem
    if not target.is_dir():
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(target)
    return target / stem


def transformers_modeling_files() -> list[Path]:
    """The ``modeling_*.py`` files of the transformers wheel (about 540 files)."""
    return sorted(unpacked("transformers").rglob("modeling_*.py"))


def byte_compile(source_tree: Path) -> None:
    """Write the bytecode of the attncheck package in ``source_tree``, as ``pip install`` does.

    A timed run should start Python the way an installed attncheck starts, from bytecode, as
    its dependencies do. Run from a source tree under ``PYTHONDONTWRITEBYTECODE`` (set on this
    project's machines), every run and each of its workers would compile the package again:
    about 0.15 s a process, which measures the environment, not attncheck. The bytecode records
    its source's size and time, so an edited module is compiled again.
    """
    if not compileall.compile_dir(source_tree / "attncheck", quiet=1):
        raise SystemExit(f"cannot byte-compile {source_tree / 'attncheck'}")
