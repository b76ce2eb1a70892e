"""Turn the paths a user typed into the files to check, lazily.

Directories are walked recursively, skipping what is never user code
(version control, virtual environments, build output, caches, installed
packages) and what the repository's ``.gitignore`` files ignore. Files named
explicitly are always checked, whatever their name: the user asked for them.
So are directories named explicitly, even an ignored one (like ruff): the
``.gitignore`` patterns that ignore the named directory itself are set aside,
the others still apply beneath it.
``exclude`` patterns from the configuration apply to walked paths only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from attncheck.sources import FileError, special_kind

if TYPE_CHECKING:
    import pathspec

SUFFIXES = (".py", ".pyi", ".ipynb", ".md", ".markdown")  # Markdown: its fenced Python blocks
SKIPPED_DIRS = frozenset(
    {".git", ".hg", ".svn", ".venv", "venv", "build", "dist", "__pycache__", "node_modules",
     "site-packages", ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".eggs"}
)


@dataclass(frozen=True)
class Candidate:
    """A file to check: where it is, how to show it, and whether the user named it."""

    path: Path
    shown: str
    explicit: bool


def gitignore_spec(lines: Iterable[str]) -> pathspec.GitIgnoreSpec:
    """Gitignore-style patterns, compiled. ``pathspec`` is imported here, on first use: it
    is a sixth of attncheck's start-up, and a run over named files never needs it."""
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(list(lines))


class Excluder:
    """Gitignore-style ``exclude`` patterns, relative to the configuration's folder."""

    def __init__(self, patterns: Iterable[str], root: Path) -> None:
        self.patterns = list(patterns)
        self.root = root.resolve()

    @cached_property
    def spec(self) -> pathspec.GitIgnoreSpec:
        """Compiled when a walk first asks: named files never are."""
        return gitignore_spec(self.patterns)

    def __call__(self, path: Path, is_dir: bool) -> bool:
        if not self.patterns:
            return False
        try:
            relative = path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            return False
        return self.spec.match_file(relative + ("/" if is_dir else ""))


def discover(paths: Iterable[str], exclude: Excluder | None = None) -> Iterator[Candidate | FileError]:
    """Yield each file to check once, in a stable order, and a note for each special file a walk
    skips (a FIFO, a device, a socket). Missing paths raise FileNotFoundError."""
    found = Discovery()
    for given in paths:
        yield from found.files(given, exclude)


class Discovery:
    """The files under paths given one at a time, each file once across them all: ``attncheck
    a.py a.py ./a.py`` checks one file, as ruff does, and so does a file both named and found
    in a named folder (the first path that reaches it shows it). The real path of each folder
    met is resolved once (``real_path``)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self.real_folders: dict[str, str] = {}

    def files(self, given: str, exclude: Excluder | None = None) -> Iterator[Candidate | FileError]:
        """The files of one given path not met before, and the notes of a walk; raises
        FileNotFoundError for a path that does not exist."""
        path = Path(given)
        if path.is_dir():
            found = _walk(path, given, exclude)
        elif path.exists():
            found = iter([Candidate(path, given, explicit=True)])
        else:
            raise FileNotFoundError(given)
        for candidate in found:
            if isinstance(candidate, FileError):
                yield candidate
                continue
            key = real_path(candidate.path, self.real_folders)
            if key not in self._seen:
                self._seen.add(key)
                yield candidate


def real_path(path: Path, real_folders: dict[str, str]) -> str:
    """``os.path.realpath(path)``, from its folder's, which ``_real_folder`` resolves once
    for all the paths that share ``real_folders``."""
    if ".." in path.parts or os.path.islink(path):  # ``..`` after a link is not lexical
        return os.path.realpath(path)
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(_real_folder(folder, real_folders), name)


def _real_folder(folder: str, real_folders: dict[str, str]) -> str:
    """``os.path.realpath`` of an absolute folder without ``..``, from its parent's: one
    ``lstat`` for a folder not seen before, where ``realpath`` reads every component of the
    path again (a tree of model files, one per folder, made that most of a cached run)."""
    real = real_folders.get(folder)
    if real is None:
        parent, name = os.path.split(folder)
        if not name or os.path.islink(folder):  # the root, or a link: resolved whole
            real = os.path.realpath(folder)
        else:
            real = os.path.join(_real_folder(parent, real_folders), name)
        real_folders[folder] = real
    return real


def _walk(top: Path, shown_top: str, exclude: Excluder | None) -> Iterator[Candidate | FileError]:
    ignores = _GitIgnores(top)
    for folder, dirnames, filenames in os.walk(top):
        here = Path(folder)
        ignores.enter(here)
        dirnames[:] = sorted(
            name for name in dirnames
            if not _skipped_dir(here / name) and not ignores.ignored(here / name, is_dir=True)
            and not (exclude and exclude(here / name, is_dir=True))
        )
        for name in sorted(filenames):
            path = here / name
            if not name.endswith(SUFFIXES) or ignores.ignored(path, is_dir=False):
                continue
            if exclude and exclude(path, is_dir=False):
                continue
            shown = os.path.normpath(os.path.join(shown_top, os.path.relpath(path, top)))
            kind = special_kind(path)
            if kind is not None:  # never opened: a FIFO with no writer would block the run
                yield FileError(shown, f"not a regular file ({kind}): skipped", level="note")
                continue
            yield Candidate(path, shown, explicit=False)


def _skipped_dir(path: Path) -> bool:
    name = path.name
    return name in SKIPPED_DIRS or name.endswith(".egg-info") or (path / "pyvenv.cfg").is_file()


class _GitIgnores:
    """The ``.gitignore`` files that apply inside a walk: the repository's from its
    root down to the walk's top, then each folder's own as the walk enters it."""

    def __init__(self, top: Path) -> None:
        self.specs: list[tuple[Path, pathspec.GitIgnoreSpec]] = []
        top = top.resolve()
        root = next((p for p in (top, *top.parents) if (p / ".git").exists()), None)
        if root is not None:
            for folder in reversed(top.relative_to(root).parents):
                self._load(root / folder)
        self.specs = [(base, _sparing(spec, top.relative_to(base).as_posix() + "/"))
                      for base, spec in self.specs]

    def enter(self, folder: Path) -> None:
        self._load(folder.resolve())

    def _load(self, folder: Path) -> None:
        file = folder / ".gitignore"
        if any(base == folder for base, _ in self.specs) or not file.is_file():
            return
        try:
            lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return
        self.specs.append((folder, gitignore_spec(lines)))

    def ignored(self, path: Path, *, is_dir: bool) -> bool:
        path = path.resolve()
        for base, spec in self.specs:
            try:
                relative = path.relative_to(base).as_posix()
            except ValueError:
                continue
            if spec.match_file(relative + ("/" if is_dir else "")):
                return True
        return False


def _sparing(spec: pathspec.GitIgnoreSpec, top: str) -> pathspec.GitIgnoreSpec:
    """``spec`` without the patterns that match ``top`` (relative to the spec's folder):
    the user named that directory, so what ignores it must not ignore all it holds."""
    if top == "./" or not spec.match_file(top):
        return spec
    return type(spec)([pattern for pattern in spec.patterns if pattern.match_file(top) is None])
