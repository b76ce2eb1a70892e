"""Item 4: the parent reads replies defensively: held against the plan, every failure confined.

``reply_plan`` is checked without a child; the hostile case runs two files in real children, one
of which forges its load-time reply: the other file's verdict must not change.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attncheck.dynamic.harness import reply_plan, sandbox
from attncheck.dynamic.runner import run_dynamic, sandbox_child
from tests.dynamic_support import Options, file_result

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PLANNED = ["plain", "batch"]


def _facts(**overrides) -> dict:
    facts = {
        "experiments": {"plain": {"ok": True, "shape": [2, 3, 4]}, "batch": {"ok": False}},
        "layers": [{"name": "qkv", "read": "x", "out": 12, "in": 4, "bias": True}],
    }
    return {**facts, **overrides}


def _tensors(**overrides) -> dict:
    tensors = {
        "plain/out": torch.zeros(2, 3, 4, dtype=torch.float64),
        "plain/weights": torch.zeros(2, 1, 3, 3, dtype=torch.float64),
        "layer0/weight": torch.zeros(12, 4, dtype=torch.float64),
        "layer0/bias": torch.zeros(12, dtype=torch.float64),
        "declared/sinks": torch.zeros(2, dtype=torch.float64),
    }
    tensors.update(overrides)
    return {name: tensor for name, tensor in tensors.items() if tensor is not None}


def test_a_reply_that_fits_the_plan_is_accepted():
    assert reply_plan.unplanned(_facts(), _tensors(), PLANNED) is None


@pytest.mark.parametrize(
    ("facts", "tensors", "refusal"),
    [
        (_facts(experiments={"mine": {"ok": True, "shape": [1]}}), _tensors(), "an experiment that was not asked for"),
        (_facts(), _tensors(**{"plain/out": None}), "lacks the tensor 'plain/out'"),
        (_facts(), _tensors(**{"plain/out": torch.zeros(2, 3, 5, dtype=torch.float64)}), "of shape [2, 3, 5]"),
        (_facts(), _tensors(**{"plain/out": torch.zeros(2, 3, 4)}), "in float32, not float64"),
        (_facts(), _tensors(**{"layer0/weight": torch.zeros(4, 12, dtype=torch.float64)}), "'layer0/weight' of shape"),
        (_facts(), _tensors(**{"layer0/bias": None}), "a bias for layer 0 that its facts do not state"),
        (_facts(), _tensors(**{"layer1/weight": torch.zeros(1, dtype=torch.float64)}), "for: 'layer1/weight'"),
        (_facts(), _tensors(**{"secret": torch.zeros(1, dtype=torch.float64)}), "not asked for: 'secret'"),
    ],
    ids=["experiment", "missing", "shape", "dtype", "layer-shape", "bias", "extra-layer", "stranger"],
)
def test_a_reply_that_does_not_fit_the_plan_is_refused(facts, tensors, refusal):
    refused = reply_plan.unplanned(facts, tensors, PLANNED)
    assert refused is not None and refusal in refused and "\n" not in refused


@pytest.mark.sandbox
def test_a_forged_load_reply_ends_its_own_file_only():
    """The forged file's targets end in an error; the correct file beside it still passes (on the
    previous code the forged reply raised TypeError out of the whole dynamic stage)."""
    options = Options(unsafe_no_sandbox=sandbox.isolation_available() != sandbox.BUBBLEWRAP, jobs=2)
    files = [file_result(FIXTURES / "hostile" / name) for name in ("forge_load_reply.py", "well_behaved.py")]
    _, (forged, correct) = run_dynamic(files, options, sandbox_child(options))
    assert (forged.status, correct.status) == ("error", "passed"), (forged.reason, correct.reason)
    assert forged.reason.startswith("the child's reply is malformed: reply.how: expected str, got list")
