"""A jailed child forked from a warm process: the sandbox without a Python start per submission.

``sandbox`` starts a new interpreter for every file, which then imports torch (one to two
seconds of CPU): for a class of 300 that is most of the run. Here each grading worker has a
zygote (``zygote``: a fresh interpreter that imported torch and the child's code once and never
holds a student's data); each submission gets a child forked from it, and before any student
code runs the child jails itself in the same jail ``attncheck check`` gets from bubblewrap:

- a new session, the sandbox's rlimits (address space, CPU, file size, open files, no core),
  death with the parent, a scrubbed environment, stdout and stderr into pipes the worker reads;
- the jail's one definition (``jail.view``), built by the child itself (``unshared``): an empty
  root holding only the system's libraries, the interpreter, its packages, attncheck and the
  submission (read-only), a size-limited tmpfs as its home (at the neutral ``/home/user``) and
  a private /tmp; new mount, PID, network, IPC and UTS namespaces;
- started by root, its own unprivileged uid with the jail's task limit; otherwise no capability;
- then ``attncheck.dynamic.inside.child.main``: the seccomp filter, the user's import, the
  executor's experiments, replies through ``channel``'s pipes.

The worker makes the request, reply and output pipes and sends their child ends to the zygote
with the order (``SCM_RIGHTS``); the zygote hands them to the forked child and closes its copies, so
the request goes in and the replies come out between the worker and the child alone, while the
zygote watches the child with the sandbox's own watch and judgement (time limit from the ready
byte, which comes to the zygote on a pipe of its own; signals), so a hang, a crash, a memory
bomb or an output flood ends as that submission's status. Its run folder (its new root, the
copies it may read) is a ``rundir`` one (locked, neutral name, swept when a killed run left
it). Where namespaces are refused (some containers), ``jail_available`` says so and the child
runs with rlimits and seccomp only, as the sandbox's fallback does.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from attncheck.dynamic.harness import channel, jail, rundir, sandbox, unshared
from attncheck.dynamic.harness.channel import ChildEnds
from attncheck.dynamic.harness.pipes import Transfer
from attncheck.dynamic.harness.sandbox import ChildOutcome, Limits
from attncheck.dynamic.harness.zygote_client import ZygoteGoneError, start_zygote

FORKED_JAIL = "forked jail (empty root, namespaces, own uid, seccomp, rlimits)"
FORKED_RLIMITS = "forked, rlimits and seccomp only"
JAIL_FAILED_EXIT = 70
JAIL_FAILED = "the grading jail failed"
UNJAILED_REFUSAL = (
    "not run: the kernel refuses the grading jail's namespaces here, so this submission would see the "
    "whole host and the other submissions; give --unsafe-no-sandbox to run it with rlimits and seccomp "
    "only (no fork, exec or signals to other processes, capped memory and time)"
)


class Forked:
    """What ``sandbox.watch`` needs of a process: its pid, and a place for its exit code."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None


def run_forked(module_path: Path, request: dict, tensors: dict[str, np.ndarray], limits: Limits,
               expose: Sequence[Path], unsafe_no_sandbox: bool = False) -> ChildOutcome:
    """Run ``request`` on ``module_path`` in a jailed child of the zygote; ``expose`` is what it
    may read of the submission (its staged folder), as ``sandbox.run_child``'s. Where the jail
    cannot be built, refused unless ``unsafe_no_sandbox``, as ``check`` refuses without bubblewrap."""
    limits = replace(limits, cpu_s=limits.cpu_seconds)
    jailed = jail_available()
    isolation = FORKED_JAIL if jailed else FORKED_RLIMITS
    if not (jailed or unsafe_no_sandbox):
        return ChildOutcome("error", UNJAILED_REFUSAL, [], "", "", isolation)
    run_dir = rundir.create()
    new_root = run_dir.path / "root"
    transfer = Transfer(limits.output_bytes)
    try:
        new_root.mkdir(mode=0o700)
        uid = jail.sandbox_uid() if jailed and jail.started_by_root() else None
        readable = jail.readable_paths(expose)
        copies = jail.readable_copies(expose, run_dir.path / "exposed") if uid is not None else {}
        transfer.send(channel.request_frame({**request, "module_path": str(module_path)}, tensors))
        home = jail.JAIL_HOME if jailed else str(run_dir.work)
        order = {"home": home, "root": str(new_root), "uid": uid,
                 "mounts": [asdict(mount) for mount in jail.view(limits.workdir_mb, readable, copies)] if jailed
                 else None, "limits": asdict(limits)}
        try:
            ending = sandbox.Ending(**start_zygote().fork(order, transfer))
        except ZygoteGoneError as error:
            return ChildOutcome("error", str(error), [], "", "", isolation)
        outcome = sandbox.outcome(module_path, limits, isolation, ending, transfer)
        said_failed = ending.returncode == JAIL_FAILED_EXIT and JAIL_FAILED in outcome.stderr
        if said_failed and sandbox.jail_may_have_failed(ending):
            reason = outcome.stderr[outcome.stderr.index(JAIL_FAILED):].splitlines()[0]
            return replace(outcome, status="error", reason=reason)
        return outcome
    finally:
        transfer.close()
        run_dir.remove()


def enter_jail(order: dict, limits: Limits, ends: ChildEnds, outputs: tuple[int, int]) -> None:
    """The forked side (in the zygote's child): jail, then the sandbox child's main with ``ends``,
    its pipes, and ``outputs`` as its stdout and stderr; never returns."""
    code = 0
    try:
        os.setsid()
        faulthandler.disable()  # a parent's handler would write a crash to the parent's stderr
        _redirect_output(outputs)
        sandbox.preexec(limits, None if order["uid"] is not None else sandbox.nproc_limit())()
        if order["mounts"] is not None:
            unshared.enter([jail.Mount(**mount) for mount in order["mounts"]], Path(order["root"]), order["uid"])
        os.environ.clear()
        os.environ.update(sandbox.environment(order["home"]))
        from attncheck.dynamic.inside import child

        child.main(Path(order["home"]), ends)
    except BaseException as error:  # the jail failed: say so on stderr, never run user code unjailed
        with contextlib.suppress(Exception):
            os.write(2, f"{JAIL_FAILED}: {type(error).__name__}: {error}\n".encode())
        code = JAIL_FAILED_EXIT
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _redirect_output(outputs: tuple[int, int]) -> None:
    for fd, target in zip((1, 2), outputs, strict=True):
        os.dup2(target, fd)
        os.close(target)
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.close(stdin)
    # The parent's sys.stdout may not be file descriptor 1 (a test runner's capture): write to the files.
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115


@functools.cache
def jail_available() -> bool:
    """Whether a forked child can enter its namespaces here (probed once)."""
    return unshared.available()
