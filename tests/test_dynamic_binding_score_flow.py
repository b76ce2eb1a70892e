"""Issue 23, item 7: a fused q/k/v projection is read in its own layout, found by where its rows flow.

BLOOM lays each head's q, k, v side by side (``view(b, s, heads, 3, head_dim)``), Falcon all of q,
then k, then v. A correct module matches one of the two references; a module with a mistake matches
neither, and its diagnosis must still read the layout the module uses, or the mistake is an
unexplained ATT903. The child records which output columns of each projection reach the scores
(``inside.score_flow``); the assignment whose value rows are the others comes first."""

from __future__ import annotations

import torch
from torch import nn

from attncheck.dynamic.binding.weights import Layer, assignments, layers_from
from attncheck.dynamic.harness import reply_plan
from attncheck.dynamic.inside.recorder import Recorder
from attncheck.dynamic.inside.score_flow import columns_to_scores
from attncheck.dynamic.reference.mha import Linear
from tests.dynamic_support import FIXTURES, checked_target

HEADS, WIDTH = 4, 32


class FusedAttention(nn.Module):
    """Plain attention over one fused layer, laid out head by head or contiguously."""

    def __init__(self, per_head: bool):
        super().__init__()
        self.per_head = per_head
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.out = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        if self.per_head:
            q, k, v = self.qkv(x).view(b, s, HEADS, 3, WIDTH // HEADS).unbind(3)
        else:
            q, k, v = (t.view(b, s, HEADS, -1) for t in self.qkv(x).split(WIDTH, dim=-1))
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        probs = torch.softmax(q @ k.transpose(-1, -2) * (WIDTH // HEADS) ** -0.5, dim=-1)
        return self.out((probs @ v).transpose(1, 2).reshape(b, s, WIDTH))


def _recorded(per_head: bool) -> tuple[list[dict], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    module, x = FusedAttention(per_head), torch.randn(2, 5, WIDTH)
    recorder = Recorder(module, {"x": x}, {"x": "x"})
    try:
        module(x)
    finally:
        recorder.close()
    tensors: dict[str, torch.Tensor] = {}
    return recorder.report(tensors), tensors


def test_the_recorded_flow_marks_the_query_and_key_columns_of_each_layout():
    for per_head in (True, False):
        facts, tensors = _recorded(per_head)
        assert [f["to_scores"] for f in facts] == [True, False]  # the output projection comes after the scores
        flow = tensors["layer0/to_scores"].bool()
        values = torch.zeros(HEADS, 3, WIDTH // HEADS, dtype=torch.bool)
        values[:, 2] = True
        expected = ~values.flatten() if per_head else torch.arange(3 * WIDTH) < 2 * WIDTH
        assert torch.equal(flow, expected)
        assert reply_plan.unplanned({"layers": facts}, tensors, ()) is None


def test_the_assignment_that_follows_the_flow_comes_first():
    for per_head, words in ((True, "fused per head"), (False, "fused, split 32/32/32")):
        facts, tensors = _recorded(per_head)
        first = assignments(layers_from(facts, tensors), WIDTH, HEADS)[0]
        assert words in first.description


def test_without_a_recorded_flow_the_order_is_the_natural_one():
    facts, tensors = _recorded(per_head=True)
    del tensors["layer0/to_scores"]
    first = assignments(layers_from(facts, tensors), WIDTH, HEADS)[0]
    assert "fused, split 32/32/32" in first.description


def test_separate_layers_are_ordered_by_flow_before_names():
    weight = torch.zeros(WIDTH, WIDTH)
    reaches, not_reached = torch.ones(WIDTH, dtype=torch.bool), torch.zeros(WIDTH, dtype=torch.bool)
    # names that lie: "value" feeds the scores, "query" does not
    layers = [
        Layer("query", "x", Linear(weight, None), not_reached),
        Layer("key", "x", Linear(weight, None), reaches),
        Layer("value", "x", Linear(weight, None), reaches),
    ]
    first = assignments(layers, WIDTH, HEADS)[0]
    assert first.description.startswith(("Q=key, K=value, V=query", "Q=value, K=key, V=query"))


def test_a_score_flow_with_no_gradient_is_empty_and_an_unused_output_reaches_nothing():
    with torch.no_grad():
        scores = torch.randn(3, 3)
    assert columns_to_scores([scores], {0: torch.randn(2, 4, requires_grad=True)}) == {}
    source = torch.randn(2, 4, requires_grad=True)
    unused = torch.randn(2, 6, requires_grad=True)
    found = columns_to_scores([source[:, :2] * 2], {0: source, 1: unused})
    assert found[0].tolist() == [True, True, False, False] and not found[1].any()


def test_a_reply_whose_flow_its_facts_do_not_state_is_refused():
    facts, tensors = _recorded(per_head=True)
    facts[0]["to_scores"] = False
    assert "score flow" in (reply_plan.unplanned({"layers": facts}, tensors, ()) or "")


def test_bloom_mistakes_are_named_in_bloom_layout_and_falcon_stays_as_it_was():
    for name, code in (
        ("variant_alibi_bloom_reversed_att405", "ATT405"),
        ("variant_alibi_bloom_scale_head_dim_att201", "ATT201"),
    ):
        findings, _, checks = checked_target(FIXTURES / "buggy" / f"{name}.py")
        assert code in {f.code for f in findings} and "ATT903" not in {f.code for f in findings}
        assert "fused per head" in checks["reference"].detail
    findings, _, checks = checked_target(FIXTURES / "buggy" / "variant_alibi_reversed_att405.py")
    assert {f.code for f in findings} == {"ATT405"} and "fused, split 32/32/32" in checks["reference"].detail
