"""Where a checked file lives in its project: the name it is imported under and the roots it needs.

A module inside a package must be imported as part of that package, as ``python -m`` or pytest
would, or its relative imports (``from ..config import X``) and the project's own absolute
imports (``from mypkg.config import X``) fail. The package is the chain of folders holding an
``__init__.py`` above the file; the folder above the chain's top is the import root. A project
also has a root of its own, found by its markers (``pyproject.toml``, ``setup.cfg``,
``setup.py``, ``.git``), and often a ``src/`` folder: both are import roots too, so that a
folder of plain scripts can import its siblings' packages. Only the filesystem is read here,
nothing is imported: the parent computes this for the child (and the sandbox mounts the roots).
"""

from __future__ import annotations

import hashlib
import keyword
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PROJECT_MARKERS = ("pyproject.toml", "setup.cfg", "setup.py", ".git")
PRIVATE_PREFIX = "user_"  # no "attncheck": user code must not tell the checker by its module name


@dataclass(frozen=True)
class Location:
    """How to import one file: under ``module`` with ``roots`` first on ``sys.path``.

    ``package`` is the dotted package the module belongs to ("" for a file outside any
    package, then imported under a private name so it cannot shadow a real module).
    ``roots`` are absolute folders, the innermost first; the child needs to read them. A module of
    a package does not get its own folder on the path (``python -m`` does not add it either), so a
    sibling ``typing.py`` cannot shadow the standard library.
    """

    path: Path
    module: str
    package: str
    roots: tuple[Path, ...]
    project: Path | None = None  # the folder with the project's marker, if any

    @property
    def in_package(self) -> bool:
        return bool(self.package)


def locate(path: Path | str) -> Location:
    """The import name and roots of ``path`` (which need not exist: stdin's shown name)."""
    path = Path(path).absolute()
    parts: list[str] = [] if path.stem == "__init__" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file() and _identifier(folder.name) and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    in_package = len(parts) > (0 if path.stem == "__init__" else 1) and all(_identifier(p) for p in parts)
    roots = [folder] if in_package else [path.parent]  # as ``python -m`` would (a script: its folder)
    project = project_root(path.parent)
    if project is not None:
        roots += [project, project / "src"]
    existing = tuple(dict.fromkeys(root for root in roots if root.is_dir()))
    if not in_package:
        return Location(path, private_name(path), "", existing, project)
    module = ".".join(parts)
    package = module if path.stem == "__init__" else module.rpartition(".")[0]
    return Location(path, module, package, existing, project)


def environment_packages(project: Path | None, environ: Mapping[str, str]) -> tuple[Path, ...]:
    """The site-packages of the user's own environment when attncheck runs from another one (pipx,
    a tool venv): the active virtual environment, else the project's ``.venv``/``venv``, for
    this Python version. The child reads them after its own, so the packages the user's code
    imports are found, and attncheck's torch is the one that runs."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [Path(environ["VIRTUAL_ENV"])] if environ.get("VIRTUAL_ENV") else []
    if project is not None:
        candidates += [project / ".venv", project / "venv"]
    ours = Path(sys.prefix).resolve()
    found = [
        env / "lib" / version / "site-packages"
        for env in candidates
        if env.resolve() != ours and (env / "lib" / version / "site-packages").is_dir()
    ]
    return tuple(dict.fromkeys(found))


def project_root(folder: Path) -> Path | None:
    """The nearest folder at or above ``folder`` that holds a project marker, if any."""
    for candidate in (folder, *folder.parents):
        if any((candidate / marker).exists() for marker in PROJECT_MARKERS):
            return candidate
    return None


def private_name(path: Path) -> str:
    """A module name for a file outside any package, that no real module has."""
    return PRIVATE_PREFIX + hashlib.sha256(str(path).encode()).hexdigest()[:12]


def is_project_module(name: str, roots: tuple[Path, ...]) -> bool:
    """Whether a top-level module ``name`` is one of the project's own (a folder or file in a root)."""
    top = name.partition(".")[0]
    return any((root / top).is_dir() or (root / f"{top}.py").is_file() for root in roots)


def _identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)
