"""Issue 17's holes, one hostile fixture each: what the child can see, call, start and send back.

Every case runs once, two at a time, in a module-scoped batch (each child imports torch);
the tests then read the outcomes. The protocol cases need no child.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
import time
from pathlib import Path

import numpy
import pytest

from attncheck.dynamic.harness import channel, jail, rundir, sandbox
from attncheck.dynamic.harness.sandbox import ChildOutcome, Limits, run_child

pytestmark = pytest.mark.sandbox

HOSTILE = Path(__file__).resolve().parents[1] / "fixtures" / "hostile"
ENTRY = {"entry": "tests.sandbox_entries:forward_then_report"}
ROOMY = Limits(timeout_s=20)
SMALL_HOME = Limits(timeout_s=20, workdir_mb=32)
SMALL_MEMORY = Limits(timeout_s=20, memory_mb=1024)
LIMITS = {"fill_disk_unlinked": SMALL_HOME, "memory_outside_the_cap": SMALL_MEMORY}  # the rest run under ROOMY
X = numpy.random.default_rng(0).standard_normal((2, 4, 8)).astype(numpy.float32)
SIBLING_SECRET = "the sibling's answer"

needs_jail = pytest.mark.skipif(
    sandbox.isolation_available() != sandbox.BUBBLEWRAP, reason="bubblewrap does not start on this machine"
)


def _checked(path: Path, request: dict = ENTRY, tensors: dict | None = None) -> ChildOutcome:
    """As ``attncheck check`` runs a file: a new interpreter in bubblewrap."""
    return run_child(path, request, {"x": X} if tensors is None else tensors, LIMITS.get(path.stem, ROOMY))


def _graded(path: Path, request: dict = ENTRY, tensors: dict | None = None) -> ChildOutcome:
    """As ``attncheck grade`` runs a submission: forked from the zygote, jailed by itself."""
    from attncheck.dynamic.harness.forked import run_forked

    limits, tests = LIMITS.get(path.stem, ROOMY), Path(__file__).resolve().parent
    return run_forked(path, request, {"x": X} if tensors is None else tensors, limits, [path.parent, tests])


@pytest.fixture(scope="module", params=[_checked, _graded], ids=["check", "grade"])
def jailed(request, tmp_path_factory) -> dict[str, ChildOutcome]:
    """The hostile modules, each run once by ``check``'s or ``grade``'s jail; read_host from a
    folder of submissions beside a sibling."""
    submissions = tmp_path_factory.mktemp("submissions")
    (submissions / "alice").mkdir()
    (submissions / "sibling").mkdir()
    (submissions / "sibling" / "secret.txt").write_text(SIBLING_SECRET)
    shutil.copy(HOSTILE / "read_host.py", submissions / "alice" / "read_host.py")
    forged = _with_forged_bytecode(submissions / "forged_bytecode")
    paths = {
        "read_host": submissions / "alice" / "read_host.py",
        **{name: HOSTILE / f"{name}.py" for name in ("seccomp_escapes", "leak_in_message", "thread_bomb")},
        "fill_disk_unlinked": HOSTILE / "fill_disk_unlinked.py",
        "forge_reply_frame": HOSTILE / "forge_reply_frame.py",
        "checker_tells": HOSTILE / "checker_tells.py",
        **{name: HOSTILE / f"{name}.py" for name in ("fake_bwrap_failure", "fake_grading_jail_failure")},
        "terminal_escapes": HOSTILE / "terminal_escapes.py",
        "memory_outside_the_cap": HOSTILE / "memory_outside_the_cap.py",
        "flood_output": HOSTILE / "flood_output.py",
        "forged_bytecode": forged / "attention.py",
    }
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(request.param, path) for name, path in paths.items()}
        return {name: future.result() for name, future in futures.items()}


def _with_forged_bytecode(folder: Path) -> Path:
    """forged_bytecode/ copied to ``folder``, with an unchecked-hash pyc of other code for its helper."""
    import importlib.util
    import py_compile

    shutil.copytree(HOSTILE / "forged_bytecode", folder)
    forged = folder / "forged_helper.py"
    forged.write_text('WHO = "forged bytecode"\n')
    cached = importlib.util.cache_from_source(str(folder / "helper.py"))
    py_compile.compile(str(forged), cfile=cached, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    forged.unlink()
    return folder


def _report(outcome: ChildOutcome) -> dict:
    assert outcome.status == "ok", outcome.reason
    return outcome.replies[-1].facts


@needs_jail
def test_the_host_is_not_visible(jailed):
    """Item 1: no system secret, no grader's home, no attncheck cache, no sibling submission."""
    report = _report(jailed["read_host"])["report"]
    assert report and all(result != "read" for result in report.values()), report


@needs_jail
def test_a_host_file_cannot_come_back_in_a_message(jailed):
    """Item 1: the message of a forward's exception carries neither /etc/passwd nor 5000 characters."""
    outcome = jailed["leak_in_message"]
    texts = json.dumps([reply.facts for reply in outcome.replies]) + outcome.reason
    assert "root:" not in texts
    error = outcome.replies[-1].facts["error"]
    assert len(error["message"]) <= channel.MAX_TEXT_CHARS and len(error["traceback"]) <= channel.MAX_TEXT_CHARS


@needs_jail
def test_the_child_is_not_root_outside_its_namespace(jailed):
    """Item 1: the uid the child runs as maps to a uid other than 0 on the host."""
    report = _report(jailed["checker_tells"])["report"]
    assert report["host_uid"] != 0, report


@needs_jail
def test_nothing_in_the_childs_paths_names_the_checker(jailed):
    """Item 2: work dir, HOME, TMPDIR, argv, its own and pid 1's command lines, sys.modules,
    __main__ and the paths of its stdout and stderr look like a user's own run."""
    report = _report(jailed["checker_tells"])["report"]
    tells = ("cwd", "home", "tmpdir", "argv", "orig_argv", "cmdline", "modules", "main", "output", "init")
    assert not [key for key in tells if "attncheck" in report[key].lower()], report


@needs_jail
def test_no_frame_below_user_code_names_the_checker(jailed):
    """Item 2: ``inspect.stack()`` in a forward shows no file of the checker (its code is loaded under
    ``<stem>`` names), and no frame's globals name one (``__file__``, ``__spec__``, ``__loader__``).
    The repository's own path is left out: the test's entry and the fixture live there."""
    report = _report(jailed["checker_tells"])["report"]
    package = str(Path(jail.__file__).resolve().parents[2])
    assert "<child>" in report["stack_files"] and package not in report["stack_files"], report["stack_files"]
    files = report["stack_module_files"].replace(str(Path(__file__).resolve().parents[1]), "")
    assert "<child>" in files.split() and "attncheck" not in files.lower(), files


CHECKER_FUNCTIONS = {"call", "run", "main", "_run_target", "_run_experiment", "_choose_binding"}


@needs_jail
@pytest.mark.parametrize("jail_of", [_checked, _graded], ids=["check", "grade"])
def test_no_function_or_module_name_below_the_forward_names_the_checker(jail_of):
    """Item 2: called by the real executor, the frames below the forward show none of the checker's
    function names (they are all ``_``) and no module ``__name__`` of the checker (``<executor>``,
    not ``attncheck.dynamic.inside.executor``)."""
    from attncheck.dynamic.runner import check_file
    from tests.dynamic_support import Options, file_result

    outcomes = []

    def child(path: Path, request: dict, tensors: dict) -> ChildOutcome:
        outcomes.append(jail_of(path, {**request, "entry": "tests.sandbox_entries:executor_then_report"}, tensors))
        return outcomes[-1]

    check_file(file_result(HOSTILE / "checker_frames.py"), Options(), child)
    report = outcomes[0].replies[-1].facts["report"]
    functions, modules = report["functions"], report["modules"]
    assert "executor_then_report" in functions and "_" in functions, report  # the frames are there
    assert not CHECKER_FUNCTIONS & set(functions), report
    assert "<executor>" in modules and not [name for name in modules if "attncheck" in name], report
    assert [reply.facts.get("unit") for reply in outcomes[0].replies][-1] == "report"


ITEM_5_SYSCALLS = (
    "execve", "execveat", "unshare", "setns", "mount", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "bpf", "userfaultfd", "perf_event_open", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
)


@pytest.mark.parametrize("syscall", ITEM_5_SYSCALLS)
def test_the_seccomp_filter_denies_escapes(jailed, syscall):
    """Item 5's list, one syscall each: called with arguments that fail harmlessly when allowed
    (EBADF, ENOENT, EINVAL), each must answer EPERM."""
    report = _report(jailed["seccomp_escapes"])["report"]
    assert report[syscall] == "EPERM", report


@needs_jail
def test_threads_are_capped(jailed):
    """Item 5: RLIMIT_NPROC under the child's own uid stops a thread bomb well short of 1500."""
    facts = _report(jailed["thread_bomb"])
    assert 0 < facts["started"] < jail.MAX_TASKS, facts


def test_no_memory_is_held_outside_the_address_space_limit(jailed):
    """Item 5: a memfd's written pages and a detached SysV shared memory segment are not counted
    by RLIMIT_AS (1.5 GB held under a 1 GB cap, on main); the seccomp filter refuses both
    ``memfd_create`` and ``shmget``, so all the memory a child holds is in its address space."""
    report = _report(jailed["memory_outside_the_cap"])["report"]
    assert report == {"memfd_mb": 0, "memfd_error": "EPERM", "sysv_mb": 0, "sysv_error": "EPERM"}, report


def test_the_projects_modules_run_from_their_source_not_a_shipped_pycache(jailed):
    """Item 2: a sibling's ``__pycache__`` holding an unchecked-hash pyc of other code ran instead
    of its source (on main, in both jails): the verdict was about code the static checks and a
    reviewer never read. The project's own modules are now compiled from their source."""
    assert _report(jailed["forged_bytecode"])["report"] == {"helper": "the source"}


def test_an_output_flood_goes_through_pipes_and_only_its_head_and_tail_are_kept(jailed):
    """Item 5: the child's stdout and stderr are pipes the parent drains, not files on the host's
    disk (256 MB each there on main, outside the jail's tmpfs caps): 300 MB go through each, and
    the parent keeps 64 kB of each, its head and its tail, saying how much it left out."""
    outcome = jailed["flood_output"]
    report = _report(outcome)["report"]
    assert report == {str(fd): {"pipe": True, "written_mb": 300, "error": None} for fd in (1, 2)}, report
    for text in (outcome.stdout, outcome.stderr):
        assert len(text) < ROOMY.output_bytes + 100 and "bytes left out ..." in text
    assert outcome.stderr.startswith("confined: seccomp")  # the head is the start of the stream


def test_memfds_and_sysv_segments_are_allowed_only_where_a_gpu_driver_may_need_them():
    """CUDA's driver may share memory through memfds; a child that can use a GPU (its device
    nodes in its /dev) keeps them, and its memory is outside the jail in any case (README)."""
    import platform

    from attncheck.dynamic.harness import confine

    arch = confine._ARCHES.get(platform.machine())
    if arch is None:
        pytest.skip(f"no seccomp filter on {platform.machine()}")
    refused = {k for op, _jt, jf, k in confine._program(arch, 1, shared_memory=False) if op == 0x15 and jf == 0}
    allowed = {k for op, _jt, jf, k in confine._program(arch, 1, shared_memory=True) if op == 0x15 and jf == 0}
    assert set(arch.shared_memory) <= refused and not set(arch.shared_memory) & allowed


@needs_jail
def test_unlinked_open_files_end_in_enospc_inside_the_jail(jailed):
    """Item 5: the child's home and /tmp are size-limited tmpfs mounts of its own mount namespace,
    so files it unlinks while it holds them open count against the cap (a polling watch saw none
    of them) and fill the jail's memory file system, never the host's disk: the 33rd MB of its
    home and the 65th of /tmp fail with ENOSPC, and the file still gets its verdict."""
    report = _report(jailed["fill_disk_unlinked"])["report"]
    home_mb, tmp_mb = SMALL_HOME.workdir_mb, jail.PRIVATE_TMP_BYTES // (1024 * 1024)
    assert report["."] == {"written_mb": home_mb, "error": "ENOSPC", "fs": "tmpfs", "fs_mb": home_mb,
                           "mount": jail.JAIL_HOME}, report
    assert report["/tmp"] == {"written_mb": tmp_mb, "error": "ENOSPC", "fs": "tmpfs", "fs_mb": tmp_mb,
                              "mount": "/tmp"}, report


@pytest.mark.parametrize("name", ["fake_bwrap_failure", "fake_grading_jail_failure"])
def test_user_code_cannot_pass_its_end_off_as_the_jail_failing(jailed, name):
    """Item 2: after the child said it was ready, its stderr and exit status are user code's: a
    forward that writes bubblewrap's or grade's own "jail failed" line and exits as the jail does
    crashed (its target fails), never "error: the jail failed" (the checker's fault, not run)."""
    outcome = jailed[name]
    assert outcome.status == "crashed", outcome.reason
    assert "jail failed" not in outcome.reason and outcome.reason.startswith("exited with status"), outcome.reason


def test_a_jail_that_fails_before_the_ready_byte_is_still_reported_as_such(tmp_path):
    """The other side of the test above: bubblewrap's own failure (the child never said it was
    ready, so no user code ran) stays an error that names the jail."""
    from attncheck.dynamic.harness.pipes import Transfer


    def ended(start_s: float | None) -> ChildOutcome:
        transfer = Transfer()
        os.write(transfer.stderr.child_end, b"bwrap: Can't mount proc on /newroot/proc: Operation not permitted\n")
        transfer.drain()
        ending = sandbox.Ending(returncode=1, start_s=start_s)
        return sandbox.outcome(tmp_path / "m.py", ROOMY, sandbox.BUBBLEWRAP, ending, transfer)

    never_ready, after_ready = ended(None), ended(1.5)
    assert (never_ready.status, never_ready.reason.startswith("the bubblewrap jail failed: bwrap:")) == ("error", True)
    assert after_ready.status == "crashed"
    assert after_ready.reason == "exited with status 1 (os._exit / sys.exit in user code)"


def test_a_forged_frame_header_in_the_reply_pipe_is_refused_at_once(jailed):
    """Item 4: user code that writes a header announcing 2**40 bytes into the reply pipe gets an
    error for its file; the parent refuses the stream at the header, never waits for the bytes."""
    outcome = jailed["forge_reply_frame"]
    assert outcome.status == "error", outcome.reason
    assert outcome.reason == (
        f"reply 0 refused: its tensors are {2**40} bytes, over the limit of {channel.MAX_TENSOR_BYTES}"
    )


def test_terminal_escapes_in_an_exception_come_back_as_text(jailed):
    """Item 4: an exception whose class name and message hold ANSI escapes, a carriage return and
    a bidi override comes back with each of them escaped: it reads as what it is, and cannot erase
    or rewrite the report's lines on the grader's terminal."""
    outcome = jailed["terminal_escapes"]
    error = outcome.replies[-1].facts["error"]
    for text in (error["type"], error["message"], error["traceback"], outcome.reason):
        assert text.replace("\n", "").isprintable(), repr(text)
    assert error["message"] == "\\x1b[1A\\x1b[2K\\r\\x1b[32mall checks passed\\x1b[0m \\u202eevil"
    assert outcome.reason.startswith("user code raised: \\x1b[1A"), outcome.reason


# Item 4: the parent reads replies defensively (no child needed). Nothing the child writes is a
# file the parent opens: replies come over a pipe, so no link, FIFO or folder can be planted.


def _tensor_file(shape: list[int]) -> bytes:
    header = json.dumps({"t": {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}}).encode()
    return struct.pack("<Q", len(header)) + header


def _stream(*frames: bytes) -> channel.ReplyStream:
    stream = channel.ReplyStream()
    for frame in frames:
        stream.feed(frame)
    return stream


def test_a_zero_size_huge_tensor_is_refused_before_numpy_sees_it():
    started = time.monotonic()
    replies, refused = _stream(channel.reply_frame(b"{}", _tensor_file([0, 2**40]))).replies()
    assert replies == [] and refused is not None and "has an axis longer than" in refused and "\n" not in refused
    assert time.monotonic() - started < 1.0


def test_a_child_that_floods_the_pipe_is_refused_at_the_total_limit(monkeypatch):
    monkeypatch.setattr(channel, "MAX_TOTAL_BYTES", 64)
    replies, refused = _stream(*(channel.reply_frame(b"{}", b"") for _ in range(40))).replies()
    assert len(replies) == 32 and refused == "reply 32 refused: the replies pass 64 bytes in all"


def test_long_texts_in_replies_are_cut():
    text = json.dumps({"error": {"message": "x" * 5000}, "k" * 900: 1}).encode()
    (reply,), refused = _stream(channel.reply_frame(text, b"")).replies()
    assert refused is None
    assert all(len(key) <= channel.MAX_TEXT_CHARS for key in reply.facts)
    assert len(reply.facts["error"]["message"]) == channel.MAX_TEXT_CHARS


# Item 6: a run folder a killed run left behind is swept at the next start; a live one is not.


def test_stale_run_folders_are_swept_and_live_ones_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(rundir, "_swept", set())
    live = rundir.create()
    stale = tmp_path / f"{rundir.PREFIX}killed"
    (stale / "work").mkdir(parents=True)
    old = time.time() - 2 * rundir.FRESH_S
    for path in (stale, live.path):
        os.utime(path, (old, old))
    monkeypatch.setattr(rundir, "_swept", set())
    assert rundir.sweep_stale(tmp_path) == [stale]
    assert live.path.is_dir() and not stale.exists()
    live.remove()
    assert not live.path.exists()


# Item 6: no bubblewrap, no untrusted run, unless the operator says so.


def test_without_bubblewrap_user_code_is_refused_unless_unsafe_is_given(monkeypatch, tmp_path):
    from attncheck.dynamic import runner
    from tests.dynamic_support import Options

    monkeypatch.setattr(sandbox, "isolation_available", lambda: sandbox.RLIMITS_ONLY)
    refused = runner.sandbox_child(Options())(HOSTILE / "well_behaved.py", {}, {"x": X})
    assert refused.status == "error" and "--unsafe-no-sandbox" in refused.reason
    assert "rlimits and seccomp only" in refused.reason and "\n" not in refused.reason
    assert sandbox.refusal(unsafe_no_sandbox=True) is None


# Item 2: weights are the ones the module had when called.


def test_a_forward_that_rescales_its_own_weights_does_not_pass():
    from attncheck.dynamic.runner import check_file
    from tests.dynamic_support import Options, file_result, in_process_child

    _, (result,) = check_file(file_result(HOSTILE / "rescale_weights.py"), Options(device="cpu"), in_process_child)
    assert result.status == "error", result  # not skipped as a binding that did not fit: CI would let it by
    assert result.reason.startswith("forward raises ParametersChangedError: forward changed its own parameters")


def test_a_compiled_module_still_runs_in_the_disguised_child():
    """torch.compile (flex_attention) imports the recorder's function mode again by its module name;
    the disguise keeps those names, so a correct flex module passes in a real child (an ATT901
    "No module named 'recorder'" when the names were neutralised too)."""
    from attncheck.dynamic.runner import check_file, sandbox_child
    from tests.dynamic_support import Options, file_result

    correct = Path(__file__).resolve().parents[1] / "fixtures" / "correct" / "variant_flex_softcap.py"
    options = Options(unsafe_no_sandbox=sandbox.isolation_available() != sandbox.BUBBLEWRAP)
    findings, (result,) = check_file(file_result(correct), options, sandbox_child(options))
    assert (result.status, findings) == ("passed", []), result.reason
