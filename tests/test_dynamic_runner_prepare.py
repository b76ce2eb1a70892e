"""Binding and planning, before any child starts: attncheck's own code must not raise on any
target of any fixture, and where it does raise, only that target ends in an error.

A KeyError in the binding of one buggy fixture (a pooling module whose input is a ``torch.bmm``
operand that is never unpacked) ended the dynamic stage of every file of the run: ``attncheck
fixtures/correct fixtures/buggy`` reported all 373 targets as errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from attncheck.config import Settings
from attncheck.dynamic import runner
from tests.dynamic_support import FIXTURES, file_result

OPTIONS = Settings().dynamic_options(1)
FILES = sorted(p for p in FIXTURES.rglob("*.py") if p.is_file())


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_fixture_target_is_bound_and_planned_without_an_internal_error(path: Path) -> None:
    result = file_result(path)
    prepared = runner.prepare(result, OPTIONS)
    own = [o.reason for o in prepared.outcomes.values() if o.status == "error"]
    assert own == []
    assert len(prepared.outcomes) + len(prepared.pending) == len(result.targets)


def test_an_internal_error_while_binding_ends_that_target_alone(monkeypatch) -> None:
    path = FIXTURES / "buggy" / "mask_multiplied_attention_pooling.py"
    result = file_result(path)
    first = result.targets[0]
    bind = runner.bind

    def failing(target, declaration, text):
        if target.name == first.name:
            raise KeyError("hidden_states")
        return bind(target, declaration, text)

    monkeypatch.setattr(runner, "bind", failing)
    monkeypatch.delenv("ATTNCHECK_DEBUG", raising=False)
    prepared = runner.prepare(result, OPTIONS)
    assert prepared.outcomes[0].status == "error"
    assert prepared.outcomes[0].reason.startswith("attncheck could not bind this target: KeyError")
    assert 1 not in prepared.outcomes or prepared.outcomes[1].status != "error"


def test_the_pooling_input_used_by_bmm_and_never_unpacked_is_bound() -> None:
    result = file_result(FIXTURES / "buggy" / "mask_multiplied_attention_pooling.py")
    prepared = runner.prepare(result, OPTIONS)
    assert {o.status for o in prepared.outcomes.values()} <= {"skipped"}
