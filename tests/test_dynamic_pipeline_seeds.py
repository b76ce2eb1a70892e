"""The seed documents' run-time mistakes: 004's RoPE classes crash, 002's own test mask makes NaN rows."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from attncheck.dynamic.binding.bind import bind
from attncheck.dynamic.harness.sandbox import Limits, run_child
from attncheck.dynamic.runner import check_file
from attncheck.sources import Source
from attncheck.static.engine import FileResult, lint
from tests.dynamic_support import FIXTURES, Options, in_process_child

SEEDS = FIXTURES / "seeds"


def _static(path: Path) -> FileResult:
    return lint(Source(str(path), path.read_text(encoding="utf-8")), ())


def _line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_seed004_rope_classes_crash_inside_apply_rotary_pos_emb():
    path = SEEDS / "seed004_attention.py"
    findings, results = check_file(_static(path), Options(), in_process_child)
    crash_line = _line_of(path, "q_embed = (q * cos)")
    by_name = {r.target.name: r for r in results}
    for name in ("RoPEMultiHeadAttention", "OptimizedMultiHeadAttention"):
        result = by_name[name]
        assert result.status == "failed"
        assert "RuntimeError" in result.reason and "must match the size of tensor b" in result.reason
        assert f"(line {crash_line})" in result.reason
        codes = {f.code: f for f in findings if f.target == name}
        # The crash is named by the mistake it shows (rather than the generic ATT901),
        # with the exception and the line of the user's file that raised.
        assert set(codes) == {"ATT403"}
        crash = codes["ATT403"]
        assert crash.span.line == crash_line  # located at the user's line that raised
        assert "q * cos" in crash.message and "RuntimeError" in crash.message
        assert f"(line {crash_line})" in crash.message
    for name in ("MultiHeadAttention", "FusedMultiHeadAttention", "GroupedQueryAttention"):
        assert by_name[name].checks, f"{name} did not run"
        assert by_name[name].status != "skipped"


def test_seed002_class_reports_nan_rows():
    path = SEEDS / "seed002_self_attention.py"
    findings, results = check_file(_static(path), Options(), in_process_child)
    nan = [f for f in findings if f.code == "ATT303"]
    assert nan and "NaN" in nan[0].message
    checks = {c.name: c for c in results[0].checks}
    assert checks["fully-masked-rows"].status == "failed"


def _seed_mask(path: Path) -> np.ndarray:
    """The literal mask of the seed's ``__main__`` block, laid out as it does: (3, 2) -> (3, 8, 2, 2)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    literal = next(
        node.args[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.tensor"
    )
    rows = np.array(ast.literal_eval(literal))
    assert rows.tolist() == [[0, 1], [0, 0], [1, 0]]
    return np.broadcast_to(rows[:, None, None, :], (3, 8, 2, 2)).copy()


@pytest.mark.sandbox
def test_seed002_own_test_mask_gives_nan_rows_in_the_child():
    path = SEEDS / "seed002_self_attention.py"
    target = _static(path).targets[0]
    binding = bind(target, {"init": {"hidden_dim": 128, "head_num": 8}})
    assert binding.ok
    x = np.random.default_rng(0).random((3, 2, 128), dtype=np.float32)  # the module sees float32, as the runner sends
    unit = {
        "id": "0",
        "name": target.name,
        "is_class": True,
        "candidates": [c.to_request() for c in binding.candidates],
        "forward": binding.forward.to_request(),
        "experiments": [{"name": "seed-mask", "inputs": {"x": "x"}, "mask": "mask"}],
    }
    outcome = run_child(
        path, {"seed": 0, "device": "cpu", "targets": [unit]}, {"x": x, "mask": _seed_mask(path)}, Limits(timeout_s=20)
    )
    assert outcome.status == "ok", outcome.reason
    facts = outcome.replies[0].facts
    assert facts["experiments"]["seed-mask"]["ok"], facts
    out = outcome.replies[0].tensors["seed-mask/out"]
    nan_rows = np.isnan(out).any(-1)  # (batch, query)
    assert nan_rows[1].all()  # the seed's second sequence, mask [0, 0], sees no key
    assert not nan_rows[0].any() and not nan_rows[2].any()
