"""Find each student's submission and stage a private copy of it for checking.

A class folder holds one entry per student: a ``.py`` file, a notebook, a folder, or a
``.zip`` of any of those. Each is copied (or safely extracted) into its own folder under a
private staging root, so a submission is checked from a place no other student's code can
reach, and nothing the user owns is ever written. Notebooks are staged as Python scripts
(their code cells, magics commented out, line for line), so the dynamic check imports them
like any module. Zips are read member by member: absolute names, ``..``, links and devices
are refused, and the count and the total size are capped before anything is written. An entry
of the class folder that is a link (to ``/etc/shadow``, to a sibling's folder, to ``/``) or
not a file or folder (a FIFO) is refused unread: the grader would read it with its own rights.
Links inside a folder are left out, and so is compiled code (``.so``, ``.pyc``). A student's
name is the entry's name as it can be shown (``untrusted_text``): a newline or an ANSI escape
in it cannot forge a row of the table.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from attncheck.sources import FileError, from_bytes
from attncheck.untrusted_text import shown

KINDS = (".py", ".ipynb", ".zip")
MAX_FILES = 500  # per submission
MAX_BYTES = 20 * 1024 * 1024  # per submission, after extraction
SKIPPED_NAMES = ("__pycache__", "__MACOSX", ".git", ".ipynb_checkpoints")
# Compiled code is not staged: it would run instead of the source beside it (an extension module
# before its ``.py``), and the grade would be about code the grader cannot read.
COMPILED_SUFFIXES = (".so", ".pyd", ".pyc", ".pyo", ".dylib", ".dll")
MAX_DEPTH = 32  # folders below a submission's own; deeper ones are left out
MAX_FOLDER_CHARS = 64  # of a student's name in its staged folder's name (a file name has at most 255 bytes)


class UnreadableError(Exception):
    """A submission that cannot be staged: the message says why, in a grader's words."""


@dataclass(frozen=True)
class Submission:
    """One student's entry in the class folder, and the hash of its content."""

    student: str
    origin: Path
    digest: str


@dataclass
class Staged:
    """A submission's private copy: its Python files, and the notebook cells of converted ones."""

    submission: Submission
    folder: Path
    files: list[Path] = field(default_factory=list)
    cells: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)  # staged name -> (line, cell)


def find(root: Path, skip: tuple[Path, ...] = ()) -> list[Submission]:
    """The submissions under ``root``: one per entry of a folder (``skip``: the output folder, when
    it is inside), or the one file given."""
    if root.is_file():
        return [Submission(_student_name(root), root, content_hash(root))]
    skipped = {p.resolve() for p in skip}
    entries = sorted(p for p in root.iterdir()
                     if not p.name.startswith(".") and p.name not in SKIPPED_NAMES and p.resolve() not in skipped)
    return [Submission(_student_name(p), p, content_hash(p)) for p in entries]


def _student_name(path: Path) -> str:
    return shown(path.name if path.is_dir() else path.stem)


def content_hash(path: Path) -> str:
    """SHA-256 of a file, or of a folder's relative names and contents (in sorted order); of a
    link's target's name, or of nothing for another kind of entry: ``stage`` refuses those, and
    hashing ``/`` through a link, or reading a FIFO, would never end."""
    digest = hashlib.sha256()
    kind = stat.S_IFMT(path.lstat().st_mode)
    if kind == stat.S_IFLNK:
        digest.update(b"link\0" + os.fsencode(os.readlink(path)))
        return digest.hexdigest()
    if kind not in (stat.S_IFREG, stat.S_IFDIR):
        return digest.hexdigest()
    if kind == stat.S_IFREG:
        digest.update(path.read_bytes())
        return digest.hexdigest()
    for file in sorted(_files(path)):
        digest.update(file.relative_to(path).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


def _files(folder: Path) -> Iterator[Path]:
    """Regular files under ``folder``, links, compiled code, skipped folders and folders more than
    ``MAX_DEPTH`` deep left out. A loop, not ``os.walk``'s recursion: a folder nested 1500 deep
    ended the whole run in a RecursionError while the class was only being listed."""
    pending = [(folder, 0)]
    while pending:
        top, depth = pending.pop()
        try:
            entries = sorted(os.scandir(top), key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.name not in SKIPPED_NAMES and depth < MAX_DEPTH:
                    pending.append((Path(entry.path), depth + 1))
            elif entry.is_file(follow_symlinks=False) and not entry.name.endswith(COMPILED_SUFFIXES):
                yield Path(entry.path)


def stage(submission: Submission, staging_root: Path) -> Staged:
    """Copy or extract ``submission`` into a new folder of ``staging_root``; raise UnreadableError."""
    origin = submission.origin
    kind = stat.S_IFMT(origin.lstat().st_mode)
    if kind == stat.S_IFLNK:
        raise UnreadableError(f"a link, not a submission (to {shown(os.readlink(origin))}): not followed")
    if kind not in (stat.S_IFREG, stat.S_IFDIR):
        raise UnreadableError("not a file or a folder")
    folder = staging_root / _folder_name(submission)
    folder.mkdir(mode=0o755)
    if origin.is_dir():
        _copy_folder(origin, folder)
    elif origin.suffix == ".zip":
        _extract(origin, folder)
    elif origin.suffix in (".py", ".ipynb"):
        _copy_file(origin, folder / origin.name)
    else:
        raise UnreadableError(f"not a submission: {origin.name} (expected a .py, a .ipynb, a folder or a .zip)")
    staged = Staged(submission, folder)
    _convert_notebooks(staged)
    staged.files = sorted(p for p in _files(folder) if p.suffix == ".py")
    if not staged.files:
        raise UnreadableError("no Python file or notebook found in the submission")
    return staged


def _folder_name(submission: Submission) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in submission.student[:MAX_FOLDER_CHARS])
    safe = safe.strip(".") or "student"
    return f"{safe}-{submission.digest[:8]}"


def _copy_file(source: Path, target: Path) -> None:
    shutil.copyfile(source, target)
    target.chmod(0o644)


def _copy_folder(source: Path, target: Path) -> None:
    files = list(_files(source))
    _check_caps(len(files), sum(f.stat().st_size for f in files))
    for file in files:
        destination = target / file.relative_to(source)
        destination.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        _copy_file(file, destination)


def _check_caps(count: int, size: int) -> None:
    if count > MAX_FILES:
        raise UnreadableError(f"too many files ({count}, at most {MAX_FILES})")
    if size > MAX_BYTES:
        raise UnreadableError(f"too large ({size // 1024 // 1024} MB, at most {MAX_BYTES // 1024 // 1024} MB)")


def _extract(archive: Path, target: Path) -> None:
    """Extract a zip member by member after checking every name, type and the total size."""
    try:
        with zipfile.ZipFile(archive) as opened:
            members = [m for m in opened.infolist() if not m.is_dir()]
            _check_caps(len(members), sum(m.file_size for m in members))
            for member in members:
                relative = _safe_member_name(member)
                if relative is None:
                    continue
                destination = target.joinpath(*relative.parts)
                destination.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                with opened.open(member) as source, open(destination, "wb") as sink:
                    _copy_capped(source, sink, member.file_size)
                destination.chmod(0o644)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, RuntimeError) as error:
        raise UnreadableError(f"cannot read the zip file: {error}") from error
    except OSError as error:  # a member that is a file and a folder ("a", "a/b.py"), a name too long
        raise UnreadableError(f"cannot extract the zip file: {error.strerror or error}") from None


def _safe_member_name(member: zipfile.ZipInfo) -> PurePosixPath | None:
    """The member's relative path, None for skipped names; UnreadableError for a dangerous one."""
    name = PurePosixPath(member.filename.replace("\\", "/"))
    if name.is_absolute() or ".." in name.parts or ":" in member.filename:
        raise UnreadableError(f"the zip holds an unsafe name: {member.filename!r}")
    kind = stat.S_IFMT(member.external_attr >> 16)  # 0 when the zip was written without Unix modes
    if kind and kind != stat.S_IFREG:
        raise UnreadableError(f"the zip holds a link or a special file: {member.filename!r}")
    if any(part in SKIPPED_NAMES or part.startswith("._") for part in name.parts) or name.name.endswith(
        COMPILED_SUFFIXES
    ):
        return None
    return name


def _copy_capped(source, sink, declared: int) -> None:
    """Copy at most the declared size: a member whose data outgrows its header is refused."""
    written = 0
    while chunk := source.read(1 << 16):
        written += len(chunk)
        if written > declared or written > MAX_BYTES:
            raise UnreadableError("a zip member is larger than its header says")
        sink.write(chunk)


def _convert_notebooks(staged: Staged) -> None:
    """Each notebook becomes a Python script beside it (its code cells, line for line)."""
    for notebook in sorted(p for p in _files(staged.folder) if p.suffix == ".ipynb"):
        source = from_bytes(notebook.read_bytes(), notebook.name, notebook=True)
        notebook.unlink()
        if isinstance(source, FileError):
            raise UnreadableError(f"{notebook.name}: {source.message}")
        script = notebook.with_suffix(".py")
        if script.exists():
            script = notebook.with_name(f"{notebook.stem}_notebook.py")
        script.write_text(source.text, encoding="utf-8")
        script.chmod(0o644)
        staged.cells[script.name] = source.cells or ()


def where(staged_cells: tuple[tuple[int, int], ...], line: int) -> str:
    """A line of a staged script in the student's terms: "line 7", or "cell 3, line 2" for a notebook."""
    starts = [start for start in staged_cells if start[0] <= line]
    if not starts:
        return f"line {line}"
    first_line, cell = starts[-1]
    return f"cell {cell}, line {line - first_line + 1}"
