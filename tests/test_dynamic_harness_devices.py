"""What the jailed child gets of the machine beyond files: a login name, and the GPU when asked;
and what a crash on the GPU alone means for the verdict.

Found on a lent H200: with ``--device cuda`` every child ran on the CPU, because the jail's /dev had
no NVIDIA nodes, the scrubbed environment had no ``LD_LIBRARY_PATH`` and RLIMIT_AS stops CUDA from
reserving its address space; and files that name a cache after the user (torch.compile, triton,
transformers' imports there) failed with ``KeyError: getpwuid()``, the jail's uid having no name.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attncheck.dynamic import runner
from attncheck.dynamic.binding.bind import bind
from attncheck.dynamic.diagnosis import crashes, fault
from attncheck.dynamic.harness import jail, prestarted, sandbox
from attncheck.dynamic.harness.sandbox import ChildOutcome, Limits
from attncheck.dynamic.runner import check_file, sandbox_child
from tests.dynamic_support import FIXTURES, Options, file_result, in_process_child

NODES = ["/dev/nvidia0", "/dev/nvidia-uvm", "/dev/nvidiactl"]
needs_jail = pytest.mark.skipif(
    sandbox.isolation_available() != sandbox.BUBBLEWRAP, reason="bubblewrap does not start on this machine"
)


@pytest.fixture
def a_gpu(monkeypatch):
    monkeypatch.setattr(jail, "gpu_nodes", lambda: NODES)


def test_the_gpu_nodes_are_in_the_view_only_when_asked(a_gpu):
    asked = jail.view(64, [], gpu=True)
    assert [(m.kind, m.source, m.target) for m in asked if m.kind == "dev-bind"] == [("dev-bind", n, n) for n in NODES]
    assert [m.kind for m in asked].index("dev-bind") == 1  # right after the minimal /dev they live in
    assert not [m for m in jail.view(64, []) if m.kind == "dev-bind"]
    command = jail.bwrap_command("bwrap", 64, [], gpu=True)
    assert "--dev-bind /dev/nvidia0 /dev/nvidia0" in " ".join(command)


@pytest.mark.parametrize(("device", "nodes", "gpu"), [("auto", NODES, True), ("cuda", NODES, True),
                                                      ("cpu", NODES, False), ("auto", [], False)])
def test_the_child_gets_the_gpu_when_the_device_allows_and_the_machine_has_one(monkeypatch, device, nodes, gpu):
    monkeypatch.setattr(jail, "gpu_nodes", lambda: nodes)
    assert prestarted.limits_for(Options(device=device), 1).gpu is gpu


def test_cuda_variables_reach_only_a_gpu_child(monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/nvidia/lib64")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert sandbox.environment("/w", gpu=True)["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert not set(sandbox.CUDA_VARIABLES) & set(sandbox.environment("/w"))


@pytest.mark.parametrize(("gpu", "capped", "free"), [(True, "RLIMIT_DATA", "RLIMIT_AS"),
                                                      (False, "RLIMIT_AS", "RLIMIT_DATA")])
def test_a_gpu_child_has_its_memory_capped_without_capping_its_address_space(gpu, capped, free):
    """CUDA reserves far more address space than it uses: only the memory really written is capped."""
    code = f"import resource; print(resource.getrlimit(resource.{capped})[0], resource.getrlimit(resource.{free})[0])"
    limits = Limits(memory_mb=2048, gpu=gpu)
    done = subprocess.run([sys.executable, "-c", code], preexec_fn=sandbox.preexec(limits, None),
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == [str(2048 * 1024 * 1024), str(-1)]


def test_the_child_has_a_login_name():
    assert {sandbox.environment("/w")[name] for name in ("USER", "LOGNAME")} == {sandbox.JAIL_USER}


@needs_jail
def test_a_file_that_names_its_cache_after_the_user_imports_in_the_jail():
    options = Options()
    findings, results = check_file(
        file_result(FIXTURES / "correct" / "cache_named_after_user.py"), options, sandbox_child(options)
    )
    assert (findings, [r.status for r in results]) == ([], ["passed"]), results[0].reason


@pytest.mark.cuda
@needs_jail
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_jailed_child_runs_on_the_gpu():
    options = Options(device="cuda")
    findings, results = check_file(
        file_result(FIXTURES / "correct" / "dyn_self_attention.py"), options, sandbox_child(options)
    )
    assert [(r.device, r.status) for r in results] == [("cuda", "passed")], results[0].reason
    assert findings == []


DEVICE_ASSERT = "user code raised AcceleratorError: CUDA error: device-side assert triggered"


def _on_a_gpu(monkeypatch, crashes_on_cpu: bool = False):
    """A child that crashes whenever it is asked for the GPU (and, optionally, on the CPU too)."""
    monkeypatch.setattr(runner, "_device", lambda wanted: "cpu" if wanted == "cpu" else "cuda")

    def child(path: Path, request: dict, tensors: dict):
        if request["device"] != "cpu" or crashes_on_cpu:
            return ChildOutcome("crashed", DEVICE_ASSERT, [], "", "", "in-process")
        return in_process_child(path, request, tensors)

    return child


@pytest.mark.parametrize(("name", "codes"), [("correct/dyn_self_attention.py", []),
                                             ("buggy/scale_seq_len.py", ["ATT201"])])
def test_a_crash_only_on_the_gpu_leaves_the_verdict_to_the_cpu_run(monkeypatch, name, codes):
    """Seen on an H200: tensors made without device=, a rotary variant's device-side assert."""
    child = _on_a_gpu(monkeypatch)
    findings, results = check_file(file_result(FIXTURES / name), Options(device="cuda"), child)
    assert [f.code for f in findings] == codes
    assert results[0].device == "cpu" and results[0].status != "error"
    device_check = results[0].checks[-1]
    assert (device_check.name, device_check.status) == ("device", "failed") and DEVICE_ASSERT in device_check.detail


def test_a_crash_on_both_devices_keeps_the_gpu_verdict(monkeypatch):
    child = _on_a_gpu(monkeypatch, crashes_on_cpu=True)
    _, results = check_file(file_result(FIXTURES / "correct" / "dyn_self_attention.py"), Options(device="cuda"), child)
    assert [(r.device, r.status) for r in results] == [("cuda", "error")]


def test_rotary_variants_free_to_fail_run_on_the_cpu(monkeypatch):
    """A layout guess that indexes out of range is an IndexError on the CPU, but on a GPU a
    device-side assert that leaves CUDA unusable for the rest of the child: they never run there."""
    from attncheck.dynamic.inside import executor

    monkeypatch.setattr(executor, "_device", lambda wanted: torch.device("meta"))  # stands for the GPU
    _, results = check_file(file_result(FIXTURES / "correct" / "rope_hf.py"), Options(device="cuda"), in_process_child)
    (function,) = [r for r in results if r.target.name == "apply_rotary_pos_emb"]
    assert (function.device, function.status) == ("cpu", "passed"), function.reason


CPU_BROADCAST = "The size of tensor a (7) must match the size of tensor b (5) at non-singleton dimension 3"
CUDA_BROADCAST = (
    "The expanded size of the tensor (7) must match the existing size (5) at non-singleton dimension 3.  "
    "Target sizes: [2, 4, 5, 7].  Tensor sizes: [5, 5]"
)


def test_a_broadcast_error_reads_the_same_in_either_devices_wording():
    """Seen on an H200: SDPA's mask expansion words the mismatch its own way, so a self-attention-only
    function given differing query and key lengths was ATT901 on cuda and the harness's guess on the CPU."""
    assert crashes.broadcast_sizes(CPU_BROADCAST) == crashes.broadcast_sizes(CUDA_BROADCAST) == (7, 5)
    assert crashes.broadcast_sizes("mat1 and mat2 shapes cannot be multiplied") is None
    result = file_result(FIXTURES / "correct" / "sdpa_masks_bool_or_additive.py")
    binding = bind(next(t for t in result.targets if t.name == "causal_bool"), source=result.source.text)
    for message in (CPU_BROADCAST, CUDA_BROADCAST):
        guess = fault.harness_guess(binding, {"type": "RuntimeError", "message": message}, "", (5, 7))
        assert guess is not None and "query and key lengths that differ" in guess
