"""What the child sees and who it is: the bubblewrap command line.

The jail starts from an empty root and mounts, read-only, only what running the submission
needs: the system's programs and libraries (``/usr`` and its compatibility links), this
interpreter and its packages, the ``attncheck`` package folder (not the repository around it),
and the paths the caller exposes (the submission's file or folder; for a package, its root).
Never ``/etc``, ``/root``, ``/home``, the attncheck cache or a sibling submission. The child
writes only in its home, a tmpfs of ``Limits.workdir_mb`` at a neutral ``/home/user``, and in a
private /tmp of ``PRIVATE_TMP_BYTES``: a disk bomb (unlinked open files included) ends in ENOSPC
in the jail's own memory file systems, gone with its mount namespace, never on the host's disk.
Nothing in the child's paths names attncheck, so user code cannot tell the checker from its
author's own test by its working directory or HOME.

With a GPU wanted (``--device cuda|auto`` on a machine that has one), the host's NVIDIA device
nodes are bound into the child's /dev, so that CUDA works inside the jail as outside; the GPU
itself is shared, not isolated (see the README's threat model).

Who it runs as: started by root, bubblewrap keeps the host's user namespace and the child
drops at once to a uid of its own (``sandbox_uid``), unprivileged on the host, so that
RLIMIT_NPROC counts its tasks alone. An exposed path that uid could not read (a submission in
a 0700 folder, a 0600 file) is copied, readable, into the run folder and mounted in its place.
Started by another user, bubblewrap makes a user namespace in which the child is ``nobody``,
that user outside.
"""

from __future__ import annotations

import glob
import os
import resource
import secrets
import shutil
import site
import stat
import sys
import sysconfig
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

JAIL_HOME = "/home/user"  # the child's home and working directory, a tmpfs of its own
NOBODY = 65534
UID_BASE = 1_600_000_000  # the uids given to children started by root: far above any real account's
UID_SPAN = 1 << 24
PRIVATE_TMP_BYTES = 64 * 1024 * 1024
MAX_TASKS = 128  # threads and processes of one child (RLIMIT_NPROC under its own uid); torch needs a few
MAX_OPEN_FILES = 1024  # RLIMIT_NOFILE
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_FILES = ("/etc/ld.so.cache",)  # where the dynamic loader looks libraries up; no secrets
GPU_NODES = "/dev/nvidia*"  # NVIDIA's control, unified-memory and per-GPU device nodes


def started_by_root() -> bool:
    return os.getuid() == 0


def sandbox_uid() -> int:
    """A fresh unprivileged uid for one child started by root: its tasks are counted apart."""
    return UID_BASE + secrets.randbelow(UID_SPAN)


def gpu_nodes() -> list[str]:
    """The host's NVIDIA device nodes, which CUDA opens (none on a machine without a GPU)."""
    return sorted(glob.glob(GPU_NODES))


def python_paths() -> list[str]:
    """The folder holding the attncheck package, then this interpreter's site-packages."""
    package_root = str(Path(__file__).resolve().parents[3])
    paths = [package_root, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    paths += site.getsitepackages()
    return list(dict.fromkeys(paths))


def readable_paths(expose: Sequence[Path]) -> list[Path]:
    """Everything the child may read: the interpreter, its packages, attncheck and ``expose``."""
    attncheck_folder = Path(__file__).resolve().parents[2]
    interpreter = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent]
    packages = [Path(path) for path in python_paths()[1:]]
    return [*interpreter, *packages, attncheck_folder, *(Path(path).resolve() for path in expose)]


def readable_copies(paths: Sequence[Path], into: Path) -> dict[Path, Path]:
    """Jail path -> host path to mount there: each path itself, or a readable copy in ``into``."""
    mounts: dict[Path, Path] = {}
    for index, path in enumerate(paths):
        if _readable_by_anyone(path):
            mounts[path] = path
            continue
        copy = into / str(index)
        into.mkdir(mode=0o755, exist_ok=True)
        if path.is_dir():
            shutil.copytree(path, copy, symlinks=True)
        else:
            shutil.copy(path, copy)
        for folder, _dirs, files in os.walk(copy):
            os.chmod(folder, 0o755)
            for name in files:
                if not os.path.islink(os.path.join(folder, name)):
                    os.chmod(os.path.join(folder, name), 0o644)
        mounts[path] = copy
    return mounts


def _readable_by_anyone(path: Path) -> bool:
    """Whether ``path`` itself is world-readable (and, a folder, world-searchable).

    Only the exposed path is looked at, not the tree below it: an exposed project root holds
    thousands of files (its ``.git``, its environment), and walking them, or copying the whole
    tree for one private file inside, would cost every child start seconds to minutes. A
    private file below a readable folder simply stays unreadable to the child's uid.
    """
    mode = path.lstat().st_mode
    needed = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) else 0)
    return stat.S_ISLNK(mode) or mode & needed == needed


@dataclass(frozen=True)
class Mount:
    """One step of building the child's root, from an empty one; ``kind`` says which.

    ``dir`` a folder (0755); ``symlink`` a link to ``source``; ``ro-bind`` the host's ``source``
    read-only; ``tmpfs`` a private memory file system of ``size`` bytes, the only writable kind;
    ``proc`` the child's own /proc; ``dev`` a minimal /dev (null, zero, random, ...);
    ``dev-bind`` the host's device node ``source`` (a GPU's), usable.
    """

    kind: Literal["dir", "symlink", "ro-bind", "tmpfs", "proc", "dev", "dev-bind"]
    target: str
    source: str = ""
    size: int = 0


def view(
    home_mb: int, readable: Sequence[Path], copies: dict[Path, Path] | None = None, gpu: bool = False
) -> list[Mount]:
    """The child's whole file system, in mount order: the one definition both jails build.

    ``readable`` are mounted read-only at their own paths (from ``copies[path]`` where it names
    a copy); a tmpfs of ``home_mb`` MB at ``JAIL_HOME``; a private /tmp of ``PRIVATE_TMP_BYTES``;
    with ``gpu``, the GPU's device nodes (``gpu_nodes``).
    """
    copies = copies or {}
    mounts = [Mount("dev", "/dev")] + [Mount("dev-bind", node, node) for node in (gpu_nodes() if gpu else [])]
    mounts += [Mount("proc", "/proc"), Mount("tmpfs", "/tmp", size=PRIVATE_TMP_BYTES)]
    mounts += _system_mounts()
    roots = _outermost([path for path in readable if path.exists()])
    for folder in sorted({parent for root in roots for parent in root.parents} - {Path("/")}, key=_depth):
        mounts.append(Mount("dir", str(folder)))
    mounts += [Mount("ro-bind", str(root), str(copies.get(root, root))) for root in roots]
    return [*mounts, Mount("dir", "/home"), Mount("tmpfs", JAIL_HOME, size=home_mb * 1024 * 1024)]


def bwrap_command(
    binary: str, home_mb: int, readable: Sequence[Path], copies: dict[Path, Path] | None = None, gpu: bool = False
) -> list[str]:
    """The bwrap command line up to the program: ``view`` as bubblewrap's options."""
    command = [binary, "--tmpfs", "/"]
    for mount in view(home_mb, readable, copies, gpu):
        command += _BWRAP_OPTIONS[mount.kind](mount)
    if started_by_root():  # the child drops to its own uid itself (``drop_privileges``)
        command += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        command += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        command += ["--unshare-all", "--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY)]
        command += ["--cap-drop", "ALL"]
    # --as-pid-1: the child is pid 1 and splits itself (``unshared.split_init``), so that user code
    # does not find bubblewrap's command line, which names attncheck, in /proc/1/cmdline.
    return [*command, "--as-pid-1", "--die-with-parent", "--new-session", "--"]


_BWRAP_OPTIONS: dict[str, Callable[[Mount], list[str]]] = {
    "dir": lambda mount: ["--perms", "0755", "--dir", mount.target],
    "symlink": lambda mount: ["--symlink", mount.source, mount.target],
    "ro-bind": lambda mount: ["--ro-bind", mount.source, mount.target],
    "tmpfs": lambda mount: ["--perms", "01777", "--size", str(mount.size), "--tmpfs", mount.target],
    "proc": lambda mount: ["--proc", mount.target],
    "dev": lambda mount: ["--dev", mount.target],
    "dev-bind": lambda mount: ["--dev-bind", mount.source, mount.target],
}


def drop_privileges(uid: int, tasks: int) -> None:
    """Become ``uid`` for good (no groups, no capabilities left), with at most ``tasks`` threads.

    Root started the jail so that this uid is unprivileged on the host too; RLIMIT_NPROC, which
    the kernel does not apply to root, then counts this child's tasks alone.
    """
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))


def _system_mounts() -> list[Mount]:
    """``/usr`` and the links into it (``/lib -> usr/lib``) as on the host; the loader's cache."""
    mounts: list[Mount] = []
    for name in SYSTEM_FOLDERS:
        if os.path.islink(name):
            mounts.append(Mount("symlink", name, os.readlink(name)))
        elif os.path.isdir(name):
            mounts.append(Mount("ro-bind", name, name))
    for name in SYSTEM_FILES:
        if os.path.isfile(name):
            mounts += [Mount("dir", os.path.dirname(name)), Mount("ro-bind", name, name)]
    return mounts


def _outermost(paths: Sequence[Path]) -> list[Path]:
    """The paths not inside another of them (or inside ``/usr``, mounted already), in order."""
    unique = list(dict.fromkeys(paths))
    system = [Path(name) for name in SYSTEM_FOLDERS]
    return [
        path
        for path in unique
        if not any(other != path and other in path.parents for other in unique)
        and not any(folder == path or folder in path.parents for folder in system)
    ]


def _depth(path: Path) -> int:
    return len(path.parts)
