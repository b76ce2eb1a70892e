"""Throughput of ``attncheck grade`` against the naive loop of one ``attncheck FILE`` per submission.

Generates N typical multi-head self-attention submissions (the textbook module with names,
sizes and a mistake varied per student: a third of them buggy), then measures side by side:

- ``attncheck grade DIR --jobs J --rerun``: wall time for all N (torch imported once per worker);
- the naive loop: ``attncheck FILE`` for each of the first M submissions, one process each.

Prints submissions per minute for both (wall clock) and the ratio, and the CPU seconds each
spends per submission (this process's children, every worker and jailed child included), which
the other users of a shared machine do not change: 2 cores / CPU per submission is the rate
the machine gives when it is not shared. Usage::

    .venv/bin/python bench/grade.py [--submissions 120] [--naive 8] [--jobs 2] [--seed 1]

The seed draws the grading run's inputs and their sizes (``probes/sizes.py``): seed 1 is batch 5,
sequence 13, the largest draw; seed 6 is batch 3, sequence 9, the smallest.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TEMPLATE = '''"""Student {index}: multi-head self-attention."""
import math

import torch
import torch.nn.functional as F
from torch import nn


class {name}(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.1):
        super().__init__()
        self.{heads} = num_heads
        self.{dk} = d_model // num_heads
        self.{q} = nn.Linear(d_model, d_model)
        self.{k} = nn.Linear(d_model, d_model)
        self.{v} = nn.Linear(d_model, d_model)
        self.{o} = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        b, s, _ = x.shape
        q = self.{q}(x).view(b, s, self.{heads}, self.{dk}).transpose(1, 2)
        k = self.{k}(x).view(b, s, self.{heads}, self.{dk}).transpose(1, 2)
        v = self.{v}(x).view(b, s, self.{heads}, self.{dk}).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt({scale})
        if mask is not None:
            scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
        weights = F.softmax(scores, dim={dim})
        context = self.dropout(weights) @ v
        context = context.transpose(1, 2).contiguous().view(b, s, -1)
        return self.{o}(context)
'''
NAMES = ["MultiHeadAttention", "MHA", "SelfAttention", "Attention", "MultiHeadSelfAttention"]
PROJECTIONS = [
    ("w_q", "w_k", "w_v", "w_o"), ("q_proj", "k_proj", "v_proj", "out_proj"), ("query", "key", "value", "proj"),
]


def generate(folder: Path, count: int, seed: int = 0) -> None:
    """``count`` submissions, one folder each; every third has a wrong scale or softmax axis."""
    rng = random.Random(seed)
    for index in range(count):
        q, k, v, o = rng.choice(PROJECTIONS)
        heads, dk = rng.choice([("num_heads", "d_k"), ("h", "head_dim"), ("n_heads", "dh")])
        bug = index % 3 == 2
        scale = f"self.{heads} * self.{dk}" if bug and index % 2 else f"self.{dk}"
        dim = "-2" if bug and not index % 2 else "-1"
        student = folder / f"student{index:04d}"
        student.mkdir(parents=True)
        text = TEMPLATE.format(index=index, name=rng.choice(NAMES), heads=heads, dk=dk, q=q, k=k, v=v, o=o,
                               scale=scale, dim=dim)
        (student / "attention.py").write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=120)
    parser.add_argument("--naive", type=int, default=8, help="how many submissions the naive loop runs")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1, help="the grading run's seed (inputs and their sizes)")
    args = parser.parse_args()
    attncheck = [str(Path(sys.executable).parent / "attncheck")]
    with tempfile.TemporaryDirectory(prefix="attncheck-bench-grade-") as scratch:
        folder = Path(scratch) / "class"
        generate(folder, args.submissions)
        env = {**os.environ, "ATTNCHECK_CACHE_DIR": str(Path(scratch) / "cache")}
        started, cpu = time.perf_counter(), _children_cpu()
        subprocess.run([*attncheck, "grade", str(folder), "--out", str(Path(scratch) / "out"), "--jobs",
                        str(args.jobs), "--rerun", "--seed", str(args.seed)],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        graded, graded_cpu = time.perf_counter() - started, _children_cpu() - cpu
        started, cpu = time.perf_counter(), _children_cpu()
        for student in sorted(folder.iterdir())[: args.naive]:
            subprocess.run([*attncheck, "--no-cache", "--jobs", "1", str(student / "attention.py")], env=env,
                           stdout=subprocess.DEVNULL, check=False)
        naive, naive_cpu = (time.perf_counter() - started) / args.naive, (_children_cpu() - cpu) / args.naive
    grade_rate = args.submissions / graded * 60
    naive_rate = 60 / naive
    print(f"attncheck grade --jobs {args.jobs}: {args.submissions} submissions in {graded:.1f} s = "
          f"{grade_rate:.0f} per minute")
    print(f"naive loop (attncheck FILE, one process each, {args.naive} runs): {naive:.2f} s each = "
          f"{naive_rate:.1f} per minute")
    print(f"ratio: {grade_rate / naive_rate:.1f}x")
    per_submission = graded_cpu / args.submissions
    print(f"CPU per submission: grade {per_submission:.3f} s (start-up included), naive {naive_cpu:.3f} s; "
          f"on 2 unshared cores: grade {120 / per_submission:.0f} per minute, naive {120 / naive_cpu:.1f} "
          f"per minute, {naive_cpu / per_submission:.1f}x")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
