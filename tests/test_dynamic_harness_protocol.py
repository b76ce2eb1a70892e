"""What crosses the process boundary: the child's replies are checked against ``protocol.ReplyFacts``
in the parent, so a malformed value ends its target in an error that says why, never a traceback."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from attncheck.dynamic.harness.protocol import ReplyError, reply_facts
from attncheck.dynamic.runner import check_file
from tests.dynamic_support import FIXTURES, Options, Reply, file_result, in_process_child

CAUSAL = FIXTURES / "correct" / "causal_gpt.py"


@dataclass
class _Outcome:
    status: str
    reason: str
    replies: list


def _replies(path=CAUSAL):
    """The facts the child sends back for every target of ``path``, as JSON carries them."""
    captured = []

    def child(file, request, tensors):
        outcome = in_process_child(file, request, tensors)
        captured.extend(json.loads(json.dumps(reply.facts)) for reply in outcome.replies)
        return outcome

    check_file(file_result(path), Options(), child)
    return captured


def test_every_reply_of_a_real_run_has_the_typed_shape():
    replies = _replies()
    assert replies
    for facts in replies:
        assert reply_facts(facts) is facts
    assert {"experiments", "grads", "layers", "softmax", "dropout", "timing"} <= set(replies[0])


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (lambda f: f.update(experiments=[]), "reply.experiments: expected an object, got list"),
        (
            lambda f: f["experiments"]["plain"].update(shape=[2, "7", 32]),
            "reply.experiments['plain'].shape[1]: expected int, got str",
        ),
        (lambda f: f["experiments"]["plain"].update(ok="yes"), "reply.experiments['plain'].ok: expected bool, got str"),
        (lambda f: f.update(grads={"q.weight": "big"}), "reply.grads['q.weight']: expected float | None, got str"),
        (lambda f: f["layers"][0].pop("in"), "reply.layers[0]: lacks 'in'"),
        (lambda f: f.update(binding=3), "reply.binding: expected str | None, got int"),
        (lambda f: f["dropout"].update(calls=True), "reply.dropout.calls: expected int, got bool"),
    ],
)
def test_a_malformed_reply_is_refused_with_where_it_breaks(corrupt, message):
    facts = _replies()[0]
    corrupt(facts)
    with pytest.raises(ReplyError) as raised:
        reply_facts(facts)
    assert str(raised.value) == message


def test_keys_the_records_do_not_name_pass_through():
    facts = {"unit": "forward", "shape": [2, 4, 8], "allclose_to_zero": False}
    assert reply_facts(facts) == {"unit": "forward", "shape": [2, 4, 8], "allclose_to_zero": False}


def test_a_malformed_reply_ends_its_target_in_an_error_that_says_why():
    def child(file, request, tensors):
        outcome = in_process_child(file, request, tensors)
        for reply in outcome.replies:
            reply.facts["grads"] = "all of them"
        return outcome

    findings, results = check_file(file_result(CAUSAL), Options(), child)
    assert findings == []
    assert results and all(r.status == "error" for r in results)
    assert all(r.reason == "the child's reply is malformed: reply.grads: expected an object, got str" for r in results)


@pytest.mark.parametrize(
    ("unit", "corrupt", "message"),
    [
        ("load", {"how": ["a", "list"]}, "reply.how: expected str, got list"),
        ("import", {"error": "no module"}, "reply.error: expected an object, got str"),
        ("import", {"error": {"type": "ImportError", "line": "7"}}, "reply.error.line: expected int | None, got str"),
    ],
)
def test_a_malformed_import_or_load_reply_ends_the_files_targets_in_an_error(unit, corrupt, message):
    """The import and load units speak for every target of the file: a hostile value there is an error
    of those targets that says why, never a crash of the dynamic stage (every file of the run)."""

    def child(file, request, tensors):
        outcome = in_process_child(file, request, tensors)
        outcome.replies.insert(0, Reply({"unit": unit, **corrupt}, {}))
        return outcome

    findings, results = check_file(file_result(CAUSAL), Options(), child)
    assert findings == []
    assert results and all(r.status == "error" for r in results)
    assert all(r.reason == f"the child's reply is malformed: {message}" for r in results)
