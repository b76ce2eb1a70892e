"""The RoPE relative-position check on modules: shifting every position leaves the output unchanged.

Each test writes one small rotary self-attention module (half-split or interleaved,
positions as ``position_ids`` or a ``start_pos`` offset) with one knob turned, and
runs it through the dynamic checker in process.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from attncheck.dynamic.binding.bind import bind, position_limit
from attncheck.dynamic.probes import rope_shift as probes_rope
from attncheck.dynamic.probes.judge import Judge, plan
from attncheck.dynamic.runner import SEED, check_file
from attncheck.sources import Source
from attncheck.static.engine import lint
from attncheck.static.rules import all_rules
from tests.dynamic_support import Options, in_process_child

MODULE = """
import math

import torch
import torch.nn as nn


def rotate(x, style):
    if style == "half":
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


def cos_sin(positions, dim, base, style):
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = positions[..., None].to(torch.float64) * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1) if style == "half" else freqs.repeat_interleave(2, dim=-1)
    return emb.cos(), emb.sin()


def apply_rotary(x, positions, dim, base=10000.0, style="half", sign=1.0):
    cos, sin = (t.to(x.dtype) for t in cos_sin(positions, dim, base, style))
    if cos.dim() == 3:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    x_rot, x_pass = x[..., :dim], x[..., dim:]
    return torch.cat((x_rot * cos + rotate(x_rot, style) * (sign * sin), x_pass), dim=-1)


class RotaryAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, SIGNATURE) -> torch.Tensor:
        b, s, d = x.shape
        POSITIONS
        q, k, v = self.qkv(x).view(b, s, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = ROTATE_Q, ROTATE_K
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.head_dim), dim=-1)
        return self.out((weights @ v).transpose(1, 2).reshape(b, s, d))
"""
IDS = (
    "position_ids: torch.Tensor | None = None",
    "positions = torch.arange(s) if position_ids is None else position_ids",
)
START_POS = ("start_pos: int = 0", "positions = torch.arange(start_pos, start_pos + s)")
NO_POSITIONS = ("unused: bool = False", "positions = torch.arange(s)")
CORRECT = "apply_rotary(q, positions, RDIM, style=STYLE)"


def _module(
    tmp_path: Path, style: str = "half", positions=IDS, q: str = CORRECT, k: str = CORRECT, rdim: str = "self.head_dim"
) -> Path:
    text = MODULE.replace("SIGNATURE", positions[0]).replace("POSITIONS", positions[1])
    text = text.replace("ROTATE_Q", q).replace("ROTATE_K", k.replace("(q,", "(k,")).replace("RDIM", rdim)
    path = tmp_path / "rotary_module.py"
    path.write_text(text.replace("STYLE", repr(style)))
    return path


def _run(path: Path):
    result = lint(Source(str(path), path.read_text()), all_rules())
    findings, results = check_file(result, Options(device="cpu"), in_process_child)
    target = next(r for r in results if r.target.name == "RotaryAttention")
    check = next(c for c in target.checks if c.name == probes_rope.NAME)
    return check, [f for f in findings if f.target == "RotaryAttention"]


def _changes(detail: str) -> dict[int, float]:
    return {int(c): float(v) for c, v in re.findall(r"\+(\d+): (\S+?)[,\s]", detail)}


@pytest.mark.parametrize("style", ["half", "interleaved"])
@pytest.mark.parametrize("positions", [IDS, START_POS], ids=["position_ids", "start_pos"])
def test_a_correct_rope_is_shift_invariant_in_both_conventions(tmp_path, style, positions):
    check, findings = _run(_module(tmp_path, style, positions))
    assert check.status == "passed", check.detail
    changes = _changes(check.detail)
    assert set(changes) == {3, 17} and max(changes.values()) < 1e-6  # float32 rounding; a non-relative RoPE: > 1e-3
    assert findings == []


def test_partial_rotary_is_shift_invariant(tmp_path):
    check, findings = _run(_module(tmp_path, rdim="self.head_dim // 2"))
    assert check.status == "passed", check.detail
    assert findings == []


@pytest.mark.parametrize(
    ("q", "k"),
    [
        ("apply_rotary(q, positions, RDIM, sign=-1.0)", CORRECT),  # q and k rotate in opposite directions
        ("q", CORRECT),  # only k is rotated
        (CORRECT, "apply_rotary(q, positions, RDIM, base=500.0)"),  # k's frequencies differ from q's
        (CORRECT, "apply_rotary(q, positions * 2, RDIM)"),  # k's angle grows with the absolute position
    ],
    ids=["opposite-signs", "k-only", "different-frequencies", "absolute-positions"],
)
def test_a_rope_that_is_not_relative_is_att402_with_the_numbers(tmp_path, q, k):
    check, findings = _run(_module(tmp_path, q=q, k=k))
    assert check.status == "failed"
    assert max(_changes(check.detail).values()) > 1e-3
    shift_findings = [f for f in findings if "not relative" in f.message]
    assert [f.code for f in shift_findings] == ["ATT402"]
    assert re.search(r"changes the output by \d\.\d+", shift_findings[0].message)
    assert "ATT903" not in {f.code for f in findings}


def _judge(path: Path) -> Judge:
    """The parent's judge of RotaryAttention after one in-process child run, verdicts computed."""
    result = lint(Source(str(path), path.read_text()), all_rules())
    target_plan = plan(bind(next(t for t in result.targets if t.name == "RotaryAttention")), 0, SEED)
    outcome = in_process_child(
        path, {"seed": SEED, "device": "cpu", "targets": [dict(target_plan.unit, id="0")]}, target_plan.tensors
    )
    reply = outcome.replies[0]
    tensors = {k: torch.from_numpy(v) for k, v in reply.tensors.items()}
    judge = Judge(
        replace(target_plan, binding=target_plan.binding.chosen(reply.facts["binding"])), reply.facts, tensors
    )
    judge.verdicts()
    return judge


def test_rotating_v_under_the_shift_is_att404(tmp_path):
    path = _module(tmp_path)
    rotate_v = "        v = apply_rotary(v, positions, self.head_dim)\n        weights ="
    path.write_text(path.read_text().replace("        weights =", rotate_v, 1))
    check, findings = _run(path)
    assert check.status == "failed"
    assert {f.code for f in findings} == {"ATT404"}  # named once, by the reference diagnosis
    _, code, message = probes_rope.verdict(_judge(path))  # the shift alone tells V's rotation apart too
    assert code == "ATT404" and "RoPE is applied to V" in message


def test_a_non_relative_rope_is_not_mistaken_for_a_rotated_v(tmp_path):
    _, code, _ = probes_rope.verdict(_judge(_module(tmp_path, q="q")))
    assert code == "ATT402"


def test_a_rope_module_without_positions_is_skipped_with_the_reason(tmp_path):
    check, findings = _run(_module(tmp_path, positions=NO_POSITIONS))
    assert check.status == "skipped"
    assert "takes no positions" in check.detail
    assert findings == []


def test_positions_stay_inside_the_rotary_cache_the_binding_built(tmp_path):
    path = tmp_path / "cached.py"
    source = (Path(__file__).parent.parent / "fixtures/correct/rope_partial.py").read_text()
    path.write_text(source)
    result = lint(Source(str(path), source), all_rules())
    binding = bind(next(t for t in result.targets if t.name == "PartialRotaryAttention"))
    assert binding.forward.position_name == "position_ids" and binding.forward.position_kind == "ids"
    assert position_limit(binding) == 16
    assert probes_rope.shifts(binding, 7) == (3, 9)
    findings, results = check_file(result, Options(device="cpu"), in_process_child)
    check = next(c for c in results[0].checks if c.name == probes_rope.NAME)
    assert check.status == "passed" and set(_changes(check.detail)) == {3, 9}
    assert findings == []
