"""Real code nobody here wrote, for the benchmarks: wheels from PyPI, unpacked once.

The wheels are fetched with ``pip download --no-deps`` into ``bench/.cache``
(ignored by git) and unpacked next to them; later runs reuse them.
"""

from __future__ import annotations

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
