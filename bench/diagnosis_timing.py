"""Time ``diagnose`` per target at the brief's size: b=2, s=9, d=64, h=4, three cases.

Run: ``python bench/diagnosis_timing.py`` from the repository root. Prints the
median wall time (ms) of a single-mistake target, a two-mistake target (pair
search) and an unexplained target (full pair search, nothing matches).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from attncheck.dynamic.diagnosis.diagnose import diagnose
from attncheck.dynamic.reference.mha import Linear, Projections
from attncheck.dynamic.reference.mutants import Case, Knobs, Setting, mutated_mha
from attncheck.dynamic.reference.rope import RopeSpec


def _setup(kv_heads: int = 4, rope: RopeSpec | None = None) -> tuple[Setting, list[Case]]:
    gen = torch.Generator().manual_seed(0)
    d, h, b, s = 64, 4, 2, 9
    kv = d // h * kv_heads

    def linear(out_f: int = d) -> Linear:
        weight = torch.randn(out_f, d, generator=gen, dtype=torch.float64) / 8
        return Linear(weight, torch.randn(out_f, generator=gen, dtype=torch.float64) / 8)

    setting = Setting(Projections(linear(), linear(kv), linear(kv), linear()), h, kv_heads, rope)
    x = torch.randn(b, s, d, generator=gen, dtype=torch.float64)
    keep = torch.rand(b, 1, 1, s, generator=gen) > 0.3
    keep[..., 0] = True
    return setting, [Case(x, x, x), Case(x, x, x, keep=keep), Case(x, x, x, causal="top-left")]


def _median_ms(observations: list, setting: Setting, runs: int = 9) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        diagnose(observations, setting, 1e-6)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    print("MHA, 4 heads")
    _time_targets(*_setup())
    print("GQA 4 query / 2 KV heads, half-split RoPE")
    _time_targets(*_setup(kv_heads=2, rope=RopeSpec("half")))


def _time_targets(setting: Setting, cases: list[Case]) -> None:
    targets = {
        "single (scale d_model)": Knobs(scale="d_model"),
        "pair (scale d_model + no W_o)": Knobs(scale="d_model", output="raw"),
    }
    observations = {name: [(c, mutated_mha(c, setting, k)) for c in cases] for name, k in targets.items()}
    observations["unexplained (reference + 0.01)"] = [(c, mutated_mha(c, setting) + 0.01) for c in cases]
    for name, observed in observations.items():
        print(f"  {name:32s} {_median_ms(observed, setting):7.1f} ms (median of 9)")


if __name__ == "__main__":
    main()
