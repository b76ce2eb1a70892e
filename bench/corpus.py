"""Real code nobody here wrote, for the benchmarks: wheels from PyPI, unpacked once.

The wheels are fetched with ``pip download --no-deps`` into ``bench/.cache``
(ignored by git) and unpacked next to them; later runs reuse them.
"""

from __future__ import annotations

import compileall
import subprocess
import sys
import zipfile
from pathlib import Path

CACHE = Path(__file__).resolve().parent / ".cache"


def unpacked(package: str) -> Path:
    """The unpacked top-level package directory of ``package``'s newest wheel."""
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    stem = package.replace("-", "_")
    found = sorted(wheels.glob(f"{stem}-*.whl"))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--quiet", "-d", str(wheels), package],
            check=True,
        )
        found = sorted(wheels.glob(f"{stem}-*.whl"))
    wheel = found[-1]
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
