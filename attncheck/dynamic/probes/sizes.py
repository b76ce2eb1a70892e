"""The sizes of the probes' inputs: batch and sequence lengths, one typed value per run.

``attncheck FILE`` always plans with ``DEFAULT`` (the same inputs every run, so a finding does
not come and go). ``attncheck grade`` draws them from its run's seed (``drawn``), so a
submission that hard-codes the checker's sizes (``x.view(2, 7, ...)``) fails on another run,
and ``--seed`` reproduces the draw. The planner (``judge.plan``) and every probe read the sizes
from here through ``Planner.sizes``, never from constants of their own.

Every choice keeps what the probes rely on: a batch of at least 2 (the batch-independence probe
perturbs element 1, the padding masks differ per element), more than ``FUTURE_FROM`` + 1 self
positions and at least 5 keys (the future-leak probe and the padding masks), more than
``QUERY_PROBE`` queries, and query and key lengths that differ (a cross module's axes cannot be
confused). The lengths are odd and at most 13: no head count or head width of the checker's
modules (powers of two) equals one, and a learned position table of 16 holds them. A draw never
gives ``DEFAULT``'s batch, self length or key length: those are what a student reads off
``attncheck FILE``, so a submission built around them fails under every grading run.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

FUTURE_FROM = 4  # the future-leak probe perturbs tokens >= this one
QUERY_PROBE = 2  # the query row perturbed by the query-independence probe
BATCHES = (3, 5)
SELF_LENGTHS = (9, 11, 13)
QUERY_LENGTHS = (3, 5)
KEY_LENGTHS = (9, 11)
SALT = 0x5A1E5  # the draw's own stream: the same seed also draws inputs and weights


@dataclass(frozen=True)
class Sizes:
    """Batch and sequence lengths of one run's inputs."""

    batch: int = 2
    seq_self: int = 7  # self-attention, and the self run of a cross module
    seq_q: int = 5  # cross-attention and functions: queries
    seq_k: int = 7  # and keys

    def lengths(self, self_style: bool) -> tuple[int, int]:
        """(query length, key length) of the plain input."""
        return (self.seq_self, self.seq_self) if self_style else (self.seq_q, self.seq_k)

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    def __str__(self) -> str:
        return f"batch {self.batch}, sequence {self.seq_self} (cross: {self.seq_q} queries, {self.seq_k} keys)"


DEFAULT = Sizes()


def drawn(seed: int) -> Sizes:
    """The sizes of a run with ``seed``: the same seed, the same sizes."""
    rng = random.Random(seed ^ SALT)
    return Sizes(rng.choice(BATCHES), rng.choice(SELF_LENGTHS), rng.choice(QUERY_LENGTHS), rng.choice(KEY_LENGTHS))
