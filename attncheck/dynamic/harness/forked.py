"""A jailed child forked from a warm process: the sandbox without a Python start per submission.

``sandbox`` starts a new interpreter for every file, which then imports torch (one to two
seconds of CPU): for a class of 300 that is most of the run. Here each grading worker has a
zygote (``zygote``: a fresh interpreter that imported torch and the child's code once and never
holds a student's data); each submission gets a child forked from it, and before any student
code runs the child jails itself:

- a new session, the sandbox's rlimits (address space, CPU, file size, no core), death with the
  parent, a scrubbed environment, stdout and stderr into capped files;
- new mount, network and IPC namespaces (a new user namespace too when not root): a tmpfs over
  every hidden folder (the staging root holding every student's copy, the class folder, the
  output folder, the temporary folders), then only its own staged folder bound back, read-only,
  and its own run folder, writable; no network;
- every mount read-only but its run folder and a private /tmp; then every capability dropped
  (root keeps uid 0, whose Python may live in /root, but no privilege over a read-only tree);
- then ``attncheck.dynamic.inside.child.main``: the seccomp filter (no fork, signals to itself
  only, no ptrace), the user's import, the executor's experiments, replies through ``channel``.

The zygote watches it with the sandbox's own watch and judgement (time limit from ready, work dir
cap, signals), so a hang, a crash, a memory bomb or an output flood ends as that submission's
status. Where namespaces are refused (some containers), ``jail_available`` says so and the child
runs with rlimits and seccomp only, as the sandbox's fallback does.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import functools
import os
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from attncheck.dynamic.harness import channel, jail, sandbox
from attncheck.dynamic.harness.sandbox import ChildOutcome, Limits
from attncheck.dynamic.harness.zygote_client import ZygoteGoneError, start_zygote

FORKED_JAIL = "forked jail (namespaces, seccomp, rlimits)"
FORKED_RLIMITS = "forked, rlimits and seccomp only"
TMPFS_OPTIONS = b"mode=0755,size=64m"
JAIL_FAILED_EXIT = 70
JAIL_FAILED = "the grading jail failed"

_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWNET, _CLONE_NEWIPC = 0x20000, 0x10000000, 0x40000000, 0x08000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
_O_PATH = getattr(os, "O_PATH", 0o10000000)
_SYS_MOUNT_SETATTR, _AT_FDCWD, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 1
_PR_CAPBSET_DROP = 24

_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class Jail:
    """What a forked child may see: ``hidden`` folders are covered, ``visible`` ones bound back."""

    hidden: tuple[Path, ...]
    limits: Limits = field(default_factory=Limits)


class Forked:
    """What ``sandbox.watch`` needs of a process: its pid, and a place for its exit code."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None


def run_forked(jail: Jail, own: Path, module_path: Path, request: dict, tensors: dict[str, np.ndarray],
               limits: Limits | None = None) -> ChildOutcome:
    """Run ``request`` on ``module_path`` in a jailed child of the zygote; ``own`` is the
    submission's staged folder, the only one of the hidden places it may read."""
    limits = replace(limits or jail.limits, cpu_s=(limits or jail.limits).cpu_seconds)
    isolation = FORKED_JAIL if jail_available() else FORKED_RLIMITS
    run_dir = Path(tempfile.mkdtemp(prefix="attncheck-grade-run-"))
    workdir = run_dir / "work"
    workdir.mkdir()
    try:
        channel.write_request(workdir, {**request, "module_path": str(module_path)}, tensors)
        for name in ("stdout", "stderr"):
            (run_dir / name).touch(mode=0o600)
        order = {"own": str(own), "run_dir": str(run_dir), "workdir": str(workdir),
                 "hidden": [str(p) for p in jail.hidden], "limits": asdict(limits),
                 "namespaces": isolation == FORKED_JAIL}
        try:
            ending = sandbox.Ending(**start_zygote().fork(order))
        except ZygoteGoneError as error:
            return ChildOutcome("error", str(error), [], "", "", isolation)
        outcome = sandbox.outcome(run_dir, workdir, module_path, limits, isolation, ending)
        if ending.returncode == JAIL_FAILED_EXIT and JAIL_FAILED in outcome.stderr:
            reason = outcome.stderr[outcome.stderr.index(JAIL_FAILED):].splitlines()[0]
            return replace(outcome, status="error", reason=reason)
        return outcome
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def enter_jail(order: dict, limits: Limits) -> None:
    """The forked side (in the zygote's child): jail, then the sandbox child's main; never returns."""
    code = 0
    run_dir, workdir = Path(order["run_dir"]), Path(order["workdir"])
    try:
        os.setsid()
        faulthandler.disable()  # a parent's handler would write a crash to the parent's stderr
        _redirect_output(run_dir)
        sandbox.preexec(limits, None if order["namespaces"] else sandbox.nproc_limit())()
        if order["namespaces"]:
            _enter_namespaces(tuple(Path(p) for p in order["hidden"]), Path(order["own"]), run_dir)
        os.environ.clear()
        os.environ.update(sandbox.environment(workdir))
        from attncheck.dynamic.inside import child

        child.main(workdir)
    except BaseException as error:  # the jail failed: say so on stderr, never run user code unjailed
        with contextlib.suppress(Exception):
            os.write(2, f"{JAIL_FAILED}: {type(error).__name__}: {error}\n".encode())
        code = JAIL_FAILED_EXIT
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _redirect_output(run_dir: Path) -> None:
    for fd, name in ((1, "stdout"), (2, "stderr")):
        target = os.open(run_dir / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.close(stdin)
    # The parent's sys.stdout may not be file descriptor 1 (a test runner's capture): write to the files.
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115


def _enter_namespaces(hidden: tuple[Path, ...], own: Path, run_dir: Path) -> None:
    """Cover ``hidden`` and make every mount read-only; bind back ``own`` (read-only), ``run_dir``
    and a private temporary folder (writable); then give up every capability."""
    uid, gid = os.getuid(), os.getgid()
    flags = _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC | (0 if uid == 0 else _CLONE_NEWUSER)
    _check(_libc.unshare(flags), "unshare")
    if uid != 0:
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    # The interpreter, its packages and attncheck stay readable even where they lie under a covered
    # folder (a checkout and its venv under /tmp, as on a CI runner): the child still imports lazily.
    interpreter = {Path(sys.prefix).resolve(), *(Path(path).resolve() for path in jail.python_paths())}
    kept = [(folder, os.open(folder, _O_PATH | os.O_DIRECTORY))
            for folder in (own, run_dir, *sorted(path for path in interpreter if path.is_dir()))]
    temporary = Path(tempfile.gettempdir())
    for folder in _outermost((*hidden, temporary)):
        _mount("tmpfs", str(folder), "tmpfs", _MS_NOSUID | _MS_NODEV, TMPFS_OPTIONS)
    for folder, fd in kept:
        folder.mkdir(parents=True, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", str(folder), None, _MS_BIND | _MS_REC)
        os.close(fd)
    _read_only_tree()
    for folder in (run_dir, temporary):
        _mount(None, str(folder), None, _MS_REMOUNT | _MS_BIND | _MS_NOSUID | _MS_NODEV)
    _drop_capabilities()


def _read_only_tree() -> None:
    """Every mount of this namespace read-only, recursively (``mount_setattr``, Linux 5.12)."""

    class MountAttr(ctypes.Structure):
        _fields_ = (("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                    ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64))

    attr = MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0)
    result = _libc.syscall(_SYS_MOUNT_SETATTR, _AT_FDCWD, b"/", _AT_RECURSIVE, ctypes.byref(attr),
                           ctypes.sizeof(attr))
    _check(result, "mount_setattr /")


def _outermost(folders: tuple[Path, ...]) -> list[Path]:
    """The existing folders of ``folders`` that are not inside another of them."""
    real = sorted({Path(os.path.realpath(f)) for f in folders if os.path.isdir(f)}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for folder in real:
        if not any(parent == folder or parent in folder.parents for parent in kept):
            kept.append(folder)
    return kept


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: bytes | None = None) -> None:
    source_bytes = source.encode() if source is not None else None
    kind_bytes = kind.encode() if kind is not None else None
    _check(_libc.mount(source_bytes, target.encode(), kind_bytes, ctypes.c_ulong(flags), data), f"mount {target}")


def _drop_capabilities() -> None:
    """Empty bounding, effective and permitted sets: gone for good (no exec regains them). Root
    keeps its uid (its Python may live in /root) but, read-only mounts aside, no privilege."""
    for capability in range(64):
        if _libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows

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


@functools.cache
def jail_available() -> bool:
    """Whether a forked child can enter its namespaces here (probed once, in a throwaway child)."""
    pid = os.fork()
    if pid == 0:
        try:
            flags = _CLONE_NEWNS | (0 if os.getuid() == 0 else _CLONE_NEWUSER)
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

