"""A seccomp filter the child installs on itself before it imports user code.

Why: rlimits cannot stop a fork loop when the checker runs as root (RLIMIT_NPROC is
not enforced for root, even inside bubblewrap's user namespace, because the kernel
still sees uid 0), and without bubblewrap a root child could signal or trace any
process on the host. The filter is small and the same with or without bubblewrap:

- no new processes: ``fork``, ``vfork`` and ``clone`` without ``CLONE_THREAD`` fail
  with EPERM (threads still work: torch needs them); ``clone3`` answers ENOSYS so
  glibc falls back to ``clone``, which the filter can inspect;
- signals only to itself: ``kill``/``tgkill`` aimed at another pid fail, ``tkill`` and
  ``pidfd_send_signal`` fail;
- no ``ptrace`` or ``process_vm_readv``/``writev``;
- no way out of the jail or around the filter: no ``execve``/``execveat`` (the child is
  started; a new program would start unconfined by Python's own checks), no ``unshare``,
  ``setns``, ``mount`` and the new mount API, ``chroot``/``pivot_root``;
- no kernel interfaces with a history of escapes and no use for attention code: ``io_uring_*``
  (its requests bypass seccomp), ``bpf``, ``userfaultfd``, ``perf_event_open``, the key ring;
- no queued signals with forged senders (``rt_sigqueueinfo``, ``rt_tgsigqueueinfo``: they
  take any pid, and without bubblewrap killed the checker itself);
- no memory outside the address-space limit: ``memfd_create``, ``memfd_secret`` and SysV
  ``shmget`` make memory that stays in the host's RAM while nothing maps it, which RLIMIT_AS
  does not count (1024 memfds of 256 MB each would be 256 GB); allowed only where the child
  can use a GPU (its device nodes are in its /dev), whose driver may share memory this way and
  whose memory is outside the jail in any case (see the README's threat model);
- no other syscall ABI (x32, i386 through ``int 0x80``).

A filter cannot be removed once installed and is inherited by everything the
process becomes. It is installed with ``no_new_privs``, which needs no privilege.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from dataclasses import dataclass

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2

_LD_ABS_W = 0x20
_JEQ = 0x15
_JGE = 0x35
_JSET = 0x45
_RET = 0x06

_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_EPERM = 1
_ENOSYS = 38
_CLONE_THREAD = 0x00010000

_OFFSET_NR = 0
_OFFSET_ARCH = 4
_OFFSET_ARG0 = 16


@dataclass(frozen=True)
class _Arch:
    audit_arch: int
    forks: tuple[int, ...]  # always refused
    clone: int
    clone3: int
    signal_self_only: tuple[int, ...]  # first argument must be our pid
    refused: tuple[int, ...]  # always refused
    shared_memory: tuple[int, ...]  # refused unless a GPU driver may need them


# Syscall numbers shared by x86_64 and aarch64 (the unified table of newer calls).
_IO_URING = (425, 426, 427)  # io_uring_setup, io_uring_enter, io_uring_register
_MEMFD_SECRET = 447
_NEW_MOUNT_API = (428, 429, 430, 431, 432, 433, 442)  # open_tree, move_mount, fsopen..fspick, mount_setattr

_ARCHES = {
    "x86_64": _Arch(
        audit_arch=0xC000003E,
        forks=(57, 58),  # fork, vfork
        clone=56,
        clone3=435,
        signal_self_only=(62, 234),  # kill, tgkill
        refused=(
            *(200, 101, 310, 311, 424),  # tkill, ptrace, process_vm_readv/writev, pidfd_send_signal
            *(59, 322),  # execve, execveat
            *(272, 308, 165, 166, 155, 161),  # unshare, setns, mount, umount2, pivot_root, chroot
            *(321, 323, 298),  # bpf, userfaultfd, perf_event_open
            *(129, 297),  # rt_sigqueueinfo, rt_tgsigqueueinfo
            *(248, 249, 250),  # add_key, request_key, keyctl
            *_IO_URING,
            *_NEW_MOUNT_API,
        ),
        shared_memory=(319, 29, _MEMFD_SECRET),  # memfd_create, shmget, memfd_secret
    ),
    "aarch64": _Arch(
        audit_arch=0xC00000B7,
        forks=(),
        clone=220,
        clone3=435,
        signal_self_only=(129, 131),  # kill, tgkill
        refused=(
            *(130, 117, 270, 271, 424),
            *(221, 281),  # execve, execveat
            *(97, 268, 40, 39, 41, 51),  # unshare, setns, mount, umount2, pivot_root, chroot
            *(280, 282, 241),  # bpf, userfaultfd, perf_event_open
            *(138, 240),  # rt_sigqueueinfo, rt_tgsigqueueinfo
            *(217, 218, 219),  # add_key, request_key, keyctl
            *_IO_URING,
            *_NEW_MOUNT_API,
        ),
        shared_memory=(279, 194, _MEMFD_SECRET),  # memfd_create, shmget, memfd_secret
    ),
}


def _program(arch: _Arch, pid: int, shared_memory: bool) -> list[tuple[int, int, int, int]]:
    """The BPF program, written with symbolic jump targets and then resolved."""
    refused = (*arch.forks, *arch.refused, *(() if shared_memory else arch.shared_memory))
    code: list[tuple[int, str | int, str | int, int]] = [
        (_LD_ABS_W, 0, 0, _OFFSET_ARCH),
        (_JEQ, 0, "deny", arch.audit_arch),
        (_LD_ABS_W, 0, 0, _OFFSET_NR),
        (_JGE, "deny", 0, 0x40000000),  # the x32 ABI
        (_JEQ, "enosys", 0, arch.clone3),
    ]
    code += [(_JEQ, "deny", 0, number) for number in refused]
    code += [(_JEQ, "signal", 0, number) for number in arch.signal_self_only]
    code += [
        (_JEQ, 0, "allow", arch.clone),
        (_LD_ABS_W, 0, 0, _OFFSET_ARG0),
        (_JSET, "allow", "deny", _CLONE_THREAD),
        ("signal", 0, 0, 0),
        (_LD_ABS_W, 0, 0, _OFFSET_ARG0),
        (_JEQ, "allow", "deny", pid),
        ("allow", 0, 0, 0),
        (_RET, 0, 0, _ALLOW),
        ("deny", 0, 0, 0),
        (_RET, 0, 0, _ERRNO | _EPERM),
        ("enosys", 0, 0, 0),
        (_RET, 0, 0, _ERRNO | _ENOSYS),
    ]
    labels: dict[str, int] = {}
    instructions: list[tuple[int | str, str | int, str | int, int]] = []
    for op, jt, jf, k in code:
        if isinstance(op, str):
            labels[op] = len(instructions)
        else:
            instructions.append((op, jt, jf, k))

    def offset(target: str | int, index: int) -> int:
        return labels[target] - index - 1 if isinstance(target, str) else target

    return [(op, offset(jt, i), offset(jf, i), k) for i, (op, jt, jf, k) in enumerate(instructions)]


def install_filter(shared_memory: bool = False) -> str:
    """Install the filter on the calling process (``shared_memory``: memfds and SysV segments
    allowed, for a GPU driver); return what was done, in words."""
    arch = _ARCHES.get(platform.machine())
    if arch is None:
        return f"no seccomp filter (unsupported machine {platform.machine()})"
    blob = b"".join(struct.pack("=HBBI", *instruction) for instruction in _program(arch, os.getpid(), shared_memory))
    buffer = ctypes.create_string_buffer(blob, len(blob))

    class SockFprog(ctypes.Structure):
        _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))

    program = SockFprog(len(blob) // 8, ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"no seccomp filter (no_new_privs: {os.strerror(ctypes.get_errno())})"
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) != 0:
        return f"no seccomp filter ({os.strerror(ctypes.get_errno())})"
    refused = "io_uring or bpf" if shared_memory else "io_uring, bpf or memfd"
    return f"seccomp: no fork or exec, signals to itself only, no ptrace, namespaces, mounts, {refused}"
