"""Verdicts from data the child cannot shape: the weights the parent sends, and its check of a reply.

The child loads ``sent_weights.values`` into a module's projections before any forward; the parent
judges only replies whose reported projections are made of those values. The hostile cases run in
a real child (one of them patches the executor, which must not happen in the test process).
"""

from __future__ import annotations

from pathlib import Path

import numpy
import pytest
import torch
from torch import nn

from attncheck.dynamic.harness import sandbox, sent_weights
from attncheck.dynamic.inside import executor
from attncheck.dynamic.runner import check_file, sandbox_child
from tests.dynamic_support import Options, file_result

HOSTILE = Path(__file__).resolve().parents[1] / "fixtures" / "hostile"
SEED = 11


def _reply(weights: list[numpy.ndarray], biases: list[numpy.ndarray | None], sent: dict) -> tuple[dict, dict]:
    layers, tensors = [], {}
    for index, (weight, bias) in enumerate(zip(weights, biases, strict=True)):
        layers.append({"name": f"p{index}", "read": "x", "out": weight.shape[0], "in": weight.shape[1],
                       "bias": bias is not None})
        tensors[f"layer{index}/weight"] = torch.from_numpy(numpy.ascontiguousarray(weight))
        if bias is not None:
            tensors[f"layer{index}/bias"] = torch.from_numpy(numpy.ascontiguousarray(bias))
    return {"layers": layers, sent_weights.SENT: sent}, tensors


def test_values_are_the_same_on_both_sides_and_depend_on_the_seed():
    first = sent_weights.values(SEED, "qkv.weight", [24, 8])
    assert numpy.array_equal(first, sent_weights.values(SEED, "qkv.weight", [24, 8]))
    assert not numpy.array_equal(first, sent_weights.values(SEED + 1, "qkv.weight", [24, 8]))
    assert not numpy.array_equal(first, sent_weights.values(SEED, "o.weight", [24, 8]))
    assert first.dtype == numpy.float64 and numpy.abs(first).max() <= 8**-0.5


def test_the_layouts_a_projection_reads_are_accepted():
    """nn.Linear's (out, in), GPT-2's transposed (in, out), a packed weight's third, a head's rows,
    a packed bias's third and a zero bias."""
    packed = sent_weights.values(SEED, "in_proj_weight", [24, 8])
    packed_bias = sent_weights.values(SEED, "in_proj_bias", [24])
    conv = sent_weights.values(SEED, "c_attn.weight", [8, 24])
    facts, tensors = _reply(
        [packed[8:16], conv.T, packed[::3], packed],
        [packed_bias[8:16], None, None, numpy.zeros(24)],
        {"in_proj_weight": [24, 8], "in_proj_bias": [24], "c_attn.weight": [8, 24]},
    )
    assert sent_weights.foreign(facts, tensors, SEED) is None


@pytest.mark.parametrize(
    ("weight", "bias", "part"),
    [
        (lambda sent: sent * 2.0, None, "weight"),  # rescaled after the forward
        (lambda sent: sent + 1e-12, None, "weight"),
        (lambda sent: numpy.eye(8), None, "weight"),  # a weight never sent
        (lambda sent: sent, numpy.arange(8.0), "bias"),
    ],
    ids=["rescaled", "nudged", "invented", "bias"],
)
def test_a_weight_or_bias_not_sent_is_refused(weight, bias, part):
    sent = sent_weights.values(SEED, "q.weight", [8, 8])
    facts, tensors = _reply([weight(sent)], [bias], {"q.weight": [8, 8]})
    refused = sent_weights.foreign(facts, tensors, SEED)
    assert refused is not None and f"the {part} it reports for 'p0' is not the one it was given" in refused


def test_the_same_weights_under_another_seed_are_refused():
    facts, tensors = _reply([sent_weights.values(SEED, "q.weight", [8, 8])], [None], {"q.weight": [8, 8]})
    assert sent_weights.foreign(facts, tensors, SEED + 1) is not None


def test_a_claim_of_huge_parameters_is_refused_before_drawing():
    facts, tensors = _reply([numpy.eye(2)], [None], {"w": [1 << 12, 1 << 12]})
    assert "more than" in sent_weights.foreign(facts, tensors, SEED)


def test_the_child_loads_projections_and_random_matrices_but_keeps_constant_ones():
    class Module(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(8, 24)
            self.table = nn.Parameter(torch.randn(5, 2))
            self.position_bias = nn.Parameter(torch.zeros(2, 4, 4))
            self.norm = nn.LayerNorm(8)

    sent = dict(executor._sent_parameters(Module()))
    assert sorted(sent) == ["qkv.bias", "qkv.weight", "table"]


def test_the_parent_knows_the_childs_error_for_changed_parameters_by_its_name():
    assert executor.ParametersChangedError.__name__ == sent_weights.PARAMETERS_CHANGED


def _dynamic(name: str):
    options = Options(unsafe_no_sandbox=sandbox.isolation_available() != sandbox.BUBBLEWRAP)
    _, (result,) = check_file(file_result(HOSTILE / f"{name}.py"), options, sandbox_child(options))
    return result


@pytest.mark.sandbox
@pytest.mark.parametrize("name", ["patch_executor", "rescale_weights_after_forward"])
def test_weights_changed_or_misreported_after_the_forward_gain_nothing(name):
    """An unscaled forward that reports the weights of a scaled one (by patching the executor, or by
    rescaling its query weight once the checker takes its output) passed on main; now it is an error."""
    result = _dynamic(name)
    assert result.status == "error", (result.status, result.reason)
    assert result.reason.startswith("the weight it reports for ") and "is not the one it was given" in result.reason
