"""Shared test helpers."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from attncheck.findings import Finding
from attncheck.sources import Source
from attncheck.static.engine import lint
from attncheck.static.rule import Rule
from attncheck.static.rules import all_rules


def lint_text(text: str, rules: Sequence[type[Rule]] | None = None, path: str = "example.py") -> list[Finding]:
    """Static findings for a snippet; fails the test if the snippet does not parse."""
    result = lint(Source(path, text), rules if rules is not None else all_rules())
    assert result.error is None, result.error
    return result.findings


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own empty static-result cache, never the user's."""
    monkeypatch.setenv("ATTNCHECK_CACHE_DIR", str(tmp_path_factory.mktemp("attncheck-cache")))


@pytest.fixture
def lint_snippet():
    return lint_text
