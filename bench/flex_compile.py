"""How long torch.compile(flex_attention) takes on the probes' smallest shape, and how close it is.

Issue 23, item 4: the dynamic check runs compiled flex eagerly (``force_eager``) because compiling
took 20-36 s a shape on the CPU, against a 3 s budget a module. This measures, in a fresh process
each (a cold Inductor cache in a temporary folder, as a user's first run has), the first call of
``torch.compile(flex_attention, dynamic=False)`` at the probes' shape (batch 2, 4 heads, 7 tokens,
head_dim 8, float32) with a causal block mask, and the float32 output's error against the float64
eager reference. ``--warm`` reuses one cache folder across the runs (a second check of the same file).

    python bench/flex_compile.py [--runs 3] [--warm] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

device = sys.argv[1]
torch.manual_seed(0)
q, k, v = (torch.randn(2, 4, 7, 8, dtype=torch.float64, device=device) for _ in range(3))

def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx

def softcap(score, b, h, q_idx, kv_idx):
    return 5.0 * torch.tanh(score / 5.0)

started = time.perf_counter()
compiled = torch.compile(flex_attention, dynamic=False)
mask = create_block_mask(causal, None, None, 7, 7, device=device)
out = compiled(q.float(), k.float(), v.float(), score_mod=softcap, block_mask=mask)
first = time.perf_counter() - started
started = time.perf_counter()
compiled(q.float(), k.float(), v.float(), score_mod=softcap, block_mask=mask)
second = time.perf_counter() - started
reference = flex_attention(q, k, v, score_mod=softcap, block_mask=mask)
print(json.dumps({"first_s": first, "second_s": second,
                  "max_error": float((out.double() - reference).abs().max())}))
"""


def one_run(device: str, cache: str) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, device], capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed", "wall_s": wall}
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warm", action="store_true", help="share one Inductor cache across the runs")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as shared:
        for index in range(args.runs):
            with tempfile.TemporaryDirectory() as fresh:
                result = one_run(args.device, shared if args.warm else fresh)
            print(json.dumps({"run": index, "device": args.device, "warm_cache": args.warm, **result}))


if __name__ == "__main__":
    main()
