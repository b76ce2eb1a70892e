"""A child's run folder on the host, and the sweeping of those a killed run left behind.

Each folder is locked (``flock`` on its own descriptor) for as long as its parent lives: the
kernel drops the lock when the parent dies, however it dies. So at the start of a run, a folder
with our prefix and a ``work`` folder, ours, a minute old, whose lock can be taken belongs to no
live run and is removed; one whose lock is held belongs to a run going on beside ours and is left
alone. The prefix names no checker: the child can read its output files' paths. Every run folder
has its ``work`` folder: the child's home when it runs without a jail (in a jail, a tmpfs instead).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "run-"  # neutral: the child sees its stdout's path (``/proc/self/fd/1``) under this folder
WORK = "work"  # every run folder holds one: with the prefix, what tells ours from another program's
FRESH_S = 60.0  # younger folders are never swept: their creator may not have locked them yet

_swept: set[str] = set()  # temp folders swept by this process already
_sweep_lock = threading.Lock()


@dataclass
class RunDir:
    """A run folder and the descriptor that holds its lock."""

    path: Path
    descriptor: int

    @property
    def work(self) -> Path:
        return self.path / WORK

    def remove(self) -> None:
        """Delete the folder, then let go of its lock (once; later calls do nothing)."""
        if self.descriptor < 0:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self.descriptor)
        self.descriptor = -1


def create() -> RunDir:
    """A new locked run folder, with its ``work`` folder, in the temp folder; the first call also
    sweeps stale ones."""
    sweep_stale(Path(tempfile.gettempdir()))
    path = Path(tempfile.mkdtemp(prefix=PREFIX))
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fcntl.flock(descriptor, fcntl.LOCK_EX)
    (path / WORK).mkdir(mode=0o700)
    return RunDir(path, descriptor)


def sweep_stale(folder: Path) -> list[Path]:
    """Remove the run folders in ``folder`` that no live run holds; once per folder and process."""
    with _sweep_lock:
        if str(folder) in _swept:
            return []
        _swept.add(str(folder))
    removed = []
    now = time.time()
    for path in folder.glob(f"{PREFIX}*"):
        with contextlib.suppress(OSError):
            if path.is_symlink() or not path.is_dir() or path.stat().st_uid != os.getuid():
                continue
            if not (path / WORK).is_dir():
                continue
            if now - path.stat().st_mtime < FRESH_S:
                continue
            if _unlocked(path):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


def _unlocked(path: Path) -> bool:
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(descriptor)
    return True
