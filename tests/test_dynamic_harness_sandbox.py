"""The jail: hostile user files end in a clear status, and nothing they do gets out.

The children are slow to start (each imports torch), so every case runs once, two at
a time, in a module-scoped batch; the tests then read the outcomes.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy
import pytest
import safetensors.torch
import torch

from attncheck.dynamic.harness import channel, rundir, sandbox
from attncheck.dynamic.harness.sandbox import ChildOutcome, Limits, run_child

pytestmark = pytest.mark.sandbox

HOSTILE = Path(__file__).resolve().parents[1] / "fixtures" / "hostile"
SECRET_NAME = "ATTNCHECK_TEST_SECRET_TOKEN"
SHORT = Limits(timeout_s=2.0)
MARGIN_S = 1.5
X = numpy.random.default_rng(0).standard_normal((2, 4, 8)).astype(numpy.float32)


@dataclass(frozen=True)
class Case:
    module: str
    entry: str = "forward"
    limits: Limits = SHORT
    tensors: dict = field(default_factory=lambda: {"x": X})


@dataclass
class Ran:
    outcome: ChildOutcome
    wall_s: float


ROOMY = Limits(timeout_s=20)
SENT = {
    "x": X,
    "f64": numpy.linspace(-1, 1, 7),
    "f16": numpy.arange(6, dtype=numpy.float16).reshape(2, 3),
    "i64": numpy.array([-(2**62), 3], dtype=numpy.int64),
    "keep": numpy.tril(numpy.ones((3, 3), dtype=bool)),
}
CASES = {
    "well_behaved": Case("well_behaved.py", "round_trip", ROOMY, SENT),
    "loop_import": Case("loop_import.py", limits=SHORT),
    "ignore_signals": Case("ignore_signals.py", limits=SHORT),
    "alloc_10gb": Case("alloc_10gb.py", limits=ROOMY),
    "fork_loop": Case("fork_loop.py", limits=ROOMY),
    "os_exit": Case("os_exit.py", "echo_then_forward", ROOMY),
    "os_exit_zero": Case("os_exit_zero.py", "echo_then_forward", ROOMY),
    "sys_exit_import": Case("sys_exit_import.py", limits=ROOMY),
    "segfault": Case("segfault.py", "echo_then_forward", ROOMY),
    "escape_write": Case("escape_write.py", limits=ROOMY),
    "forge_output": Case("forge_output.py", "echo_then_forward", ROOMY),
    "monkeypatch_torch": Case("monkeypatch_torch.py", limits=ROOMY),
    "fill_disk": Case("fill_disk.py", limits=Limits(timeout_s=20, workdir_mb=32)),
    "fill_disk_fsize": Case("fill_disk.py", limits=Limits(timeout_s=20, file_mb=8)),
    "env_secrets": Case("env_secrets.py", "leaks", ROOMY),
    "import_error": Case("import_error.py", limits=ROOMY),
}
FALLBACK_CASES = {
    "well_behaved": Case("well_behaved.py", "echo", ROOMY),
    "fork_loop": CASES["fork_loop"],
    "loop_import": CASES["loop_import"],
}


def _run(case: Case, folder: Path = HOSTILE) -> Ran:
    start = time.monotonic()
    request = {"entry": f"tests.sandbox_entries:{case.entry}"}
    outcome = run_child(folder / case.module, request, case.tensors, case.limits)
    return Ran(outcome, time.monotonic() - start)


def _batch(cases: dict[str, Case], run: Callable[[Case], Ran] = _run) -> dict[str, Ran]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(run, case) for name, case in cases.items()}
        return {name: future.result() for name, future in futures.items()}


def _snapshot(folder: Path) -> dict[str, float]:
    return {str(path): path.stat().st_mtime for path in folder.rglob("*")}


def _escapes() -> set[Path]:
    return set(Path("/tmp").glob("attncheck-escape-*"))


def _run_dirs() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob(f"{rundir.PREFIX}*"))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Run every case under the machine's best isolation; record the world around it."""
    escape_target = tmp_path_factory.mktemp("outside") / "attncheck-escape-env.txt"
    # Work dirs go to a folder of this test's own, so that other runs on the
    # machine cannot make it look as if ours were left behind.
    saved_tempdir, tempfile.tempdir = tempfile.tempdir, str(tmp_path_factory.mktemp("runs"))
    before = {"fixtures": _snapshot(HOSTILE), "escapes": _escapes(), "run_dirs": _run_dirs()}
    original_allclose = torch.allclose
    os.environ[SECRET_NAME] = "hunter2"
    os.environ["ESCAPE_TARGET"] = str(escape_target)
    try:
        ran = _batch(CASES)
        after = {"fixtures": _snapshot(HOSTILE), "escapes": _escapes(), "run_dirs": _run_dirs()}
    finally:
        del os.environ[SECRET_NAME], os.environ["ESCAPE_TARGET"]
        tempfile.tempdir = saved_tempdir
    return {
        "ran": ran,
        "before": before,
        "after": after,
        "escape_target": escape_target,
        "original_allclose": original_allclose,
    }


@pytest.fixture(scope="module")
def fallback():
    """A few cases again with bubblewrap taken away: rlimits and seccomp only."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sandbox, "isolation_available", lambda: sandbox.RLIMITS_ONLY)
        return _batch(FALLBACK_CASES)


def outcome(world, name: str) -> ChildOutcome:
    return world["ran"][name].outcome


def test_isolation_is_reported(world):
    assert {ran.outcome.isolation for ran in world["ran"].values()} == {sandbox.isolation_available()}
    assert sandbox.isolation_available() in (sandbox.BUBBLEWRAP, sandbox.RLIMITS_ONLY)


def test_well_behaved_module_round_trips_exactly(world):
    result = outcome(world, "well_behaved")
    assert (result.status, result.reason) == ("ok", "completed: 7 replies")
    *echoes, _widened, forward = result.replies
    received = {name: array for reply in echoes for name, array in reply.tensors.items()}
    assert received.keys() == SENT.keys()
    for name, array in SENT.items():
        assert received[name].dtype == array.dtype and numpy.array_equal(received[name], array), name
    assert forward.facts == {"unit": "forward", "shape": [2, 4, 8], "allclose_to_zero": False}
    assert forward.tensors["out"].shape == (2, 4, 8)


def test_bfloat16_is_widened_exactly_and_labelled(world):
    widened = outcome(world, "well_behaved").replies[-2]
    expected = torch.from_numpy(X).to(torch.bfloat16).to(torch.float32).numpy()
    assert widened.tensors["x16"].dtype == numpy.float32
    assert numpy.array_equal(widened.tensors["x16"], expected)
    assert widened.source_dtypes == {"x16": "bfloat16"}


@pytest.mark.parametrize("name", ["loop_import", "ignore_signals"])
def test_endless_code_times_out_on_time(world, name):
    ran = world["ran"][name]
    timeout = CASES[name].limits.timeout_s
    assert (ran.outcome.status, ran.outcome.reason) == ("timeout", f"timed out after {timeout:g} s")
    assert ran.outcome.start_s is not None  # the limit counts from the child's start-up, not the launch
    assert ran.wall_s - ran.outcome.start_s < timeout + MARGIN_S


def test_huge_allocation_is_a_clear_out_of_memory(world):
    result = outcome(world, "alloc_10gb")
    assert result.status == "ok"
    assert result.reason == "ran out of memory (limit 4096 MB) (alloc_10gb.py, line 9)"


def test_fork_loop_is_refused(world):
    result = outcome(world, "fork_loop")
    assert result.status == "ok"
    assert result.reason.startswith("user code raised: PermissionError")
    assert result.replies[0].facts["error"]["line"] == 12


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("os_exit", "exited with status 3 (os._exit / sys.exit in user code)"),
        ("os_exit_zero", "exited with status 0 before finishing (os._exit in user code)"),
        ("segfault", "killed by signal SIGSEGV (segmentation fault)"),
    ],
)
def test_a_dying_child_keeps_the_replies_it_finished(world, name, reason):
    result = outcome(world, name)
    assert (result.status, result.reason) == ("crashed", reason)
    (echo,) = result.replies
    assert echo.facts["unit"] == "echo:x" and numpy.array_equal(echo.tensors["x"], X)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("sys_exit_import", "import failed: SystemExit: sys.exit(0) called (sys_exit_import.py, line 7)"),
        ("import_error", "import failed: ZeroDivisionError: division by zero (import_error.py, line 5)"),
    ],
)
def test_import_failure_is_a_reply_not_a_crash(world, name, reason):
    result = outcome(world, name)
    assert (result.status, result.reason) == ("ok", reason)
    (reply,) = result.replies
    assert reply.facts["unit"] == "import" and reply.facts["error"]["traceback"]


def test_writes_outside_the_work_dir_do_not_land(world):
    assert outcome(world, "escape_write").status == "ok"
    if sandbox.isolation_available() != sandbox.BUBBLEWRAP:
        pytest.skip("only the bubblewrap jail makes the filesystem read-only")
    assert world["after"]["escapes"] == world["before"]["escapes"]
    assert not world["escape_target"].exists()


def test_fixture_folder_is_unchanged_and_work_dirs_are_gone(world):
    assert world["after"]["fixtures"] == world["before"]["fixtures"]
    assert world["after"]["run_dirs"] == world["before"]["run_dirs"]


def test_stdout_and_planted_files_change_nothing(world):
    result = outcome(world, "forge_output")
    assert "PASSED" in result.stdout
    assert (result.status, result.reason) == ("ok", "completed: 2 replies")
    echo, forward = result.replies
    assert numpy.array_equal(echo.tensors["x"], X)
    assert forward.facts == {"unit": "forward", "shape": [2, 4, 8], "allclose_to_zero": False}
    assert numpy.array_equal(forward.tensors["out"], 2 * X)


def test_monkeypatched_torch_stays_in_the_child(world):
    """The child's torch.allclose says all is close; the parent's, untouched, disagrees."""
    result = outcome(world, "monkeypatch_torch")
    (reply,) = result.replies
    assert reply.facts["allclose_to_zero"] is True
    assert torch.allclose is world["original_allclose"]
    out = torch.from_numpy(reply.tensors["out"])
    assert not torch.allclose(out, torch.zeros_like(out))


def test_work_dir_size_is_capped(world):
    """Its home is a tmpfs of ``workdir_mb``: the 33rd MB fails in user code, a clear verdict."""
    result = outcome(world, "fill_disk")
    if sandbox.isolation_available() != sandbox.BUBBLEWRAP:
        pytest.skip("only the bubblewrap jail mounts a size-limited home")
    assert result.status == "ok"
    assert result.reason == "import failed: OSError: [Errno 28] No space left on device (fill_disk.py, line 7)"


def test_file_size_limit_becomes_an_error_in_user_code(world):
    result = outcome(world, "fill_disk_fsize")
    assert result.status == "ok"
    assert result.reason.startswith("import failed: OSError: [Errno 27] File too large (fill_disk.py, line")


def test_parent_secrets_do_not_reach_the_child(world):
    (reply,) = outcome(world, "env_secrets").replies
    assert reply.facts["module_saw"] == {}
    assert set(reply.facts["child_env"]) <= {*sandbox.environment(Path("/w")), "PWD"}


def test_sibling_modules_import_and_no_bytecode_is_written(tmp_path):
    (tmp_path / "helper.py").write_text("SCALE = 3\n")
    (tmp_path / "model.py").write_text(
        "import helper\nfrom torch import nn\n\n\nclass Attention(nn.Module):\n"
        "    def forward(self, x):\n        return x * helper.SCALE\n"
    )
    ran = _run(Case("model.py", limits=Limits(timeout_s=20)), folder=tmp_path)
    assert ran.outcome.status == "ok", ran.outcome.reason
    assert numpy.array_equal(ran.outcome.replies[0].tensors["out"], 3 * X)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["helper.py", "model.py"]


def test_fallback_without_bubblewrap(fallback):
    assert {ran.outcome.isolation for ran in fallback.values()} == {sandbox.RLIMITS_ONLY}
    good = fallback["well_behaved"].outcome
    assert good.status == "ok" and numpy.array_equal(good.replies[0].tensors["x"], X)
    assert fallback["fork_loop"].outcome.reason.startswith("user code raised: PermissionError")
    looping = fallback["loop_import"]
    assert looping.outcome.status == "timeout"
    assert looping.wall_s - looping.outcome.start_s < SHORT.timeout_s + MARGIN_S


@pytest.mark.parametrize(
    ("module", "request_", "tensors", "reason"),
    [
        ("missing.py", {}, {}, "no such file: "),
        ("well_behaved.py", {"bad": object()}, {}, "cannot send the request: Object of type object"),
        ("well_behaved.py", {}, {"x": [1, 2]}, "cannot send the request: input 'x' is a list"),
    ],
)
def test_bad_input_is_a_one_line_error(module, request_, tensors, reason):
    result = run_child(HOSTILE / module, request_, tensors, SHORT)
    assert result.status == "error" and result.reason.startswith(reason) and "\n" not in result.reason


# The protocol, checked without a child: what the parent accepts from the reply pipe.


def _frame(facts: object, tensors: dict | None = None) -> bytes:
    blob = safetensors.torch.save(tensors) if tensors is not None else b""
    return channel.reply_frame(json.dumps(facts).encode(), blob)


def _fed(*chunks: bytes, piece: int = 7) -> channel.ReplyStream:
    """A stream fed ``chunks`` joined, in pieces of ``piece`` bytes, as a pipe may cut them."""
    stream, data = channel.ReplyStream(), b"".join(chunks)
    for start in range(0, len(data), piece):
        stream.feed(data[start : start + piece])
    return stream


def test_replies_are_read_in_order_whatever_the_pipe_cuts():
    stream = _fed(_frame({"unit": "a"}, {"t": torch.ones(2)}), _frame({"unit": "b"}), channel.done_frame(2))
    replies, refused = stream.replies()
    assert refused is None and stream.finished
    assert [reply.facts["unit"] for reply in replies] == ["a", "b"]
    assert numpy.array_equal(replies[0].tensors["t"], numpy.ones(2, dtype=numpy.float32))


def test_a_frame_cut_off_by_the_childs_end_is_dropped_and_nothing_after_done_is_read():
    cut = _fed(_frame({"unit": "a"}), _frame({"unit": "half"})[:-3])
    assert ([reply.facts for reply in cut.replies()[0]], cut.refused, cut.finished) == ([{"unit": "a"}], None, False)
    after = _fed(_frame({"unit": "a"}), channel.done_frame(1), _frame({"unit": "late"}))
    assert [reply.facts for reply in after.replies()[0]] == [{"unit": "a"}] and after.finished


@pytest.mark.parametrize(
    ("frame", "refusal"),
    [
        (_frame([1, 2]), "reply 1 refused: the reply is not a JSON object"),
        (channel.reply_frame(b"{not json", b""), "reply 1 refused: invalid JSON"),
        (
            channel.FRAME_HEADER.pack(channel.REPLY, channel.MAX_REPLY_JSON_BYTES + 1, 0),
            f"reply 1 refused: its JSON is {channel.MAX_REPLY_JSON_BYTES + 1} bytes, over the limit of",
        ),
        (
            channel.FRAME_HEADER.pack(channel.REPLY, 2, 2**40),
            f"reply 1 refused: its tensors are {2**40} bytes, over the limit of",
        ),
        (channel.FRAME_HEADER.pack(9, 2, 0) + b"{}", "reply 1 refused: a frame of unknown kind 9"),
        (
            _frame({}, {"t": torch.ones(2, dtype=torch.bfloat16)}),
            "reply 1 refused: its tensors are not safetensors numpy can hold",
        ),
        (channel.reply_frame(b"{}", b"\xff" * 64), "reply 1 refused: its tensors are not safetensors"),
    ],
    ids=["not-an-object", "not-json", "json-over-limit", "tensors-over-limit", "unknown-kind", "bfloat16", "garbage"],
)
def test_bad_replies_are_refused_with_a_reason(frame, refusal):
    stream = _fed(_frame({"unit": "fine"}), frame, _frame({"unit": "never read"}))
    replies, refused = stream.replies()
    assert [reply.facts for reply in replies] == [{"unit": "fine"}]
    assert refused is not None and refused.startswith(refusal) and "\n" not in refused


def test_a_refused_length_is_refused_before_its_bytes_are_kept():
    """A header announcing 2**40 bytes is refused on its own: nothing is buffered waiting for them."""
    stream = _fed(channel.FRAME_HEADER.pack(channel.REPLY, 2, 2**40), b"x" * 100_000)
    assert stream.refused is not None and len(stream.buffer) == 0
