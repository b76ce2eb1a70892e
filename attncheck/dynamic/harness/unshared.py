"""The jail's view (``jail.view``) built by a forked child itself, with namespaces and mounts.

``attncheck check`` has bubblewrap build the view; ``attncheck grade`` forks its children from a
warm zygote (no new interpreter per submission), so the child builds the same view with the same
system calls bubblewrap makes: new mount, PID, network, IPC and UTS namespaces (and a user
namespace when not root); an empty tmpfs as the new root; each ``Mount`` of the view in order;
every mount read-only but its home and /tmp (size-limited tmpfs mounts); ``pivot_root`` into it and the host's root
detached. What the child can see is therefore the same list in both commands.

The PID namespace only holds the children of the process that made it: ``enter`` forks twice
more. The process that called it waits for pid 1 of the namespace, which builds the root and
waits in turn for pid 2 (``split_init``), which goes on as the child; each ends as its child
ended, so the zygote's watch still sees one process ending, with the child's status.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import select
import signal
import time
from collections.abc import Sequence
from pathlib import Path

from attncheck.dynamic.harness import jail
from attncheck.dynamic.harness.jail import Mount

_CLONE_NEWNS, _CLONE_NEWUTS, _CLONE_NEWIPC = 0x20000, 0x04000000, 0x08000000
_CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 8, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_SYS_MOUNT_SETATTR, _AT_FDCWD, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 1
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_PR_SET_PDEATHSIG, _PR_CAPBSET_DROP = 1, 24
_ARG_START = 45  # in /proc/self/stat, counted from 0 after the command name (field 48), then arg_end
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
DEVICE_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
                "stderr": "/proc/self/fd/2"}

_libc = ctypes.CDLL(None, use_errno=True)
cpu_before_split = 0.0  # CPU seconds pid 1 spent (the start-up) before pid 2 began: pid 2 counts from 0


def enter(mounts: Sequence[Mount], new_root: Path, uid: int | None) -> None:
    """Go on in new namespaces seeing only ``mounts`` (built on ``new_root``, an empty folder),
    as ``uid`` (started by root) or without any capability (otherwise).

    Returns in the jailed process (pid 2 of its namespace) only; the processes above it end as it ends.
    """
    host_uid, host_gid = os.getuid(), os.getgid()
    flags = _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWUTS
    _check(_libc.unshare(flags | (0 if host_uid == 0 else _CLONE_NEWUSER)), "unshare")
    if host_uid != 0:
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{host_uid} {host_uid} 1")
        Path("/proc/self/gid_map").write_text(f"{host_gid} {host_gid} 1")
    _fork_bound_to_parent()  # the child is pid 1 of the new PID namespace: it builds the root
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount("tmpfs", str(new_root), "tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=0755")
    for mount in mounts:
        _BUILDERS[mount.kind](mount, _inside(new_root, mount.target))
    _set_read_only(str(new_root), True, _AT_RECURSIVE)
    for mount in mounts:  # only these mounts themselves: a submission bound below /tmp stays read-only
        if mount.kind == "tmpfs":
            _set_read_only(_inside(new_root, mount.target), False, 0)
    os.chdir(new_root)
    _check(_libc.syscall(_SYS_PIVOT_ROOT[platform.machine()], b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", _MNT_DETACH), "umount the host's root")
    os.chdir(jail.JAIL_HOME)
    _drop_bounding_set()
    split_init()
    if uid is not None:
        jail.drop_privileges(uid, jail.MAX_TASKS)
    else:
        _drop_capabilities()


def _fork_bound_to_parent() -> None:
    """Fork; the parent waits and ends as the child ends (``wait_in``), the child returns, bound to die
    with it (PR_SET_PDEATHSIG).

    The signal is set only after the fork: a parent that dies in between (a grader killed as it starts
    a jail) would leave a jail that nothing stops, user code running on under pid 1 of its namespace.
    The child cannot ask ``getppid()`` (a namespace's pid 1 sees 0), so the parent holds the write end
    of a pipe it never writes, and the child, once the signal is set, checks that end is still open."""
    alive, held = os.pipe()
    pid = os.fork()
    if pid:
        os.close(alive)
        wait_in(pid)
    os.close(held)
    _check(_libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl PDEATHSIG")
    if orphaned(alive):
        os._exit(1)
    os.close(alive)


def orphaned(alive: int) -> bool:
    """Every writer of the pipe whose read end is ``alive`` has closed it: the parent holding it died."""
    poll = select.poll()
    poll.register(alive, select.POLLIN)
    return any(events & (select.POLLHUP | select.POLLIN) for _, events in poll.poll(0))


def split_init() -> None:
    """As pid 1 of a PID namespace: stay behind as a waiter named ``python``, go on as pid 2.

    Pid 1 ignores the signals it sends itself (a crash by ``os.kill(os.getpid(), SIGSEGV)``),
    and user code reads its command line in ``/proc/1/cmdline``: the one that started the
    zygote or, in ``check``, the child, both naming attncheck. So user code runs as pid 2 in
    both jails (bubblewrap is told ``--as-pid-1`` so that it is not pid 1 itself, with its
    whole command line), and pid 1 names no checker.
    """
    overwrite_command_line(b"python\0")
    global cpu_before_split
    cpu_before_split = time.process_time()
    _fork_bound_to_parent()


def overwrite_command_line(wanted: bytes) -> None:
    """Write ``wanted`` over this process's argument area (``/proc/self/cmdline``), cut to its
    size, the rest zeroed: as ``setproctitle`` does, with no privilege."""
    with open("/proc/self/stat", "rb") as stat:
        fields = stat.read().rpartition(b")")[2].split()
    start, end = int(fields[_ARG_START]), int(fields[_ARG_START + 1])
    if not 0 < start < end:
        return
    size = end - start
    ctypes.memmove(start, wanted[: size - 1].ljust(size, b"\0"), size)


def wait_in(pid: int) -> None:
    """In the parent of a fork (``pid`` not 0): wait for the child and end as it ended.

    Pid 1 cannot end by its own signal, so it exits with 128 + the signal, as bubblewrap does;
    the process outside the namespace turns that back into the signal, for the zygote's watch.
    """
    if pid == 0:
        return
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    signum = -code if code < 0 else code - 128 if code > 128 else None
    if signum is None or signum not in signal.valid_signals():
        os._exit(code)
    if os.getpid() != 1:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    os._exit(128 + signum)


def _inside(new_root: Path, target: str) -> str:
    return str(new_root) + target


def _folder(mount: Mount, where: str) -> None:
    """A new folder, 0755; one made already (a private /tmp holding a submission) is left as it is."""
    if not os.path.isdir(where):
        os.makedirs(where, mode=0o755)


def _symlink(mount: Mount, where: str) -> None:
    os.makedirs(os.path.dirname(where), mode=0o755, exist_ok=True)
    os.symlink(mount.source, where)


def _bind(mount: Mount, where: str) -> None:
    if os.path.isdir(mount.source):
        os.makedirs(where, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(where), mode=0o755, exist_ok=True)
        Path(where).touch(mode=0o644)
    _mount(mount.source, where, None, _MS_BIND | _MS_REC)


def _tmpfs(mount: Mount, where: str) -> None:
    os.makedirs(where, mode=0o755, exist_ok=True)
    _mount("tmpfs", where, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=1777,size={mount.size}".encode())


def _proc(mount: Mount, where: str) -> None:
    os.makedirs(where, mode=0o755, exist_ok=True)
    _mount("proc", where, "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)


def _dev(mount: Mount, where: str) -> None:
    """As bubblewrap's ``--dev``: the harmless devices bound from the host, the usual links."""
    os.makedirs(where, mode=0o755, exist_ok=True)
    _mount("tmpfs", where, "tmpfs", _MS_NOSUID | _MS_NOEXEC, b"mode=0755")
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            _bind(Mount("ro-bind", f"/dev/{name}", f"/dev/{name}"), f"{where}/{name}")
    for name, target in DEVICE_LINKS.items():
        os.symlink(target, f"{where}/{name}")
    os.mkdir(f"{where}/shm", 0o1777)


_BUILDERS = {"dir": _folder, "symlink": _symlink, "ro-bind": _bind, "tmpfs": _tmpfs,
             "proc": _proc, "dev": _dev, "dev-bind": _bind}


def _set_read_only(path: str, read_only: bool, recursive: int) -> None:
    """Set or clear read-only on the mount at ``path`` (and, ``recursive``, every mount below it)."""

    class MountAttr(ctypes.Structure):
        _fields_ = (("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                    ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64))

    attr = MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0) if read_only else MountAttr(0, _MOUNT_ATTR_RDONLY, 0, 0)
    result = _libc.syscall(_SYS_MOUNT_SETATTR, _AT_FDCWD, path.encode(), recursive, ctypes.byref(attr),
                           ctypes.sizeof(attr))
    _check(result, f"mount_setattr {path}")


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: bytes | None = None) -> None:
    source_bytes = source.encode() if source is not None else None
    kind_bytes = kind.encode() if kind is not None else None
    _check(_libc.mount(source_bytes, target.encode(), kind_bytes, ctypes.c_ulong(flags), data), f"mount {target}")


def _drop_bounding_set() -> None:
    """No capability can come back, by exec or otherwise (needs CAP_SETPCAP: before the uid)."""
    for capability in range(64):
        if _libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows


def _drop_capabilities() -> None:
    """Empty effective and permitted sets: a child of a user namespace keeps no privilege in it."""

    class Header(ctypes.Structure):
        _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))

    class Data(ctypes.Structure):
        _fields_ = (("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32))

    header = Header(0x20080522, 0)
    empty = (Data * 2)()
    _check(_libc.capset(ctypes.byref(header), ctypes.byref(empty)), "capset")


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def available() -> bool:
    """Whether a forked child can make its namespaces here (probed in a throwaway child)."""
    pid = os.fork()
    if pid == 0:
        try:
            flags = _CLONE_NEWNS | _CLONE_NEWPID | (0 if os.getuid() == 0 else _CLONE_NEWUSER)
            os._exit(0 if _libc.unshare(flags) == 0 else 1)
        except BaseException:
            os._exit(1)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status) == 0
        except InterruptedError:
            continue
        except ChildProcessError:
            return False


