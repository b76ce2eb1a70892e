"""The fuzzer's property, a few seconds of it in the suite: on mutated rule examples and
fixtures (bench/fuzz.py's mutations), linting never raises nor reports an internal error,
every position lies inside its file, and ``--fix`` output parses and changes only its edits."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attncheck import pipeline
from attncheck.config import Settings
from attncheck.sources import Source
from bench import fuzz

_SEEDS = [text for text in fuzz.seeds() if len(text) < 4000]
_CODES = pipeline.enabled_codes(Settings())


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(seed=st.sampled_from(_SEEDS), salt=st.integers(0, 1 << 30),
       mutations=st.lists(st.sampled_from(fuzz.SHALLOW_MUTATIONS), min_size=1, max_size=3))
def test_lint_survives_mutated_examples(seed: str, mutations: list, salt: int) -> None:
    rng = random.Random(salt)
    text = seed
    for mutate in mutations:
        text = mutate(text, rng)
    assert fuzz.problems(pipeline.lint_one(Source("mutated.py", text), _CODES)) == [], text
