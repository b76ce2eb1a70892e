"""Issue 16/17: user code sees float32 inputs and weights, as in its author's own test; the judging
stays exact (float64 references from the same float32 values), within the catalogue's float32
tolerance."""

from __future__ import annotations

import numpy as np
import torch

from attncheck.dynamic.probes import precision
from attncheck.dynamic.probes.sizes import DEFAULT, drawn
from attncheck.dynamic.reference.tolerance import ABSOLUTE_FLOOR
from tests.dynamic_support import FIXTURES, checked_target, write_module


def test_inputs_are_sent_in_float32_and_judged_in_float64_from_the_same_values():
    planned = np.random.default_rng(0).standard_normal((2, 7, 32))
    sent = precision.as_sent(planned)
    assert sent.dtype == np.float32
    judged = precision.as_judged(planned)
    assert judged.dtype == torch.float64 and torch.equal(judged, torch.from_numpy(sent).double())
    mask = np.ones((2, 7), dtype=bool)
    assert precision.as_sent(mask) is mask and precision.as_judged(mask).dtype == torch.bool


def test_mpt_fill_with_the_dtypes_minimum_then_softmax_of_float_scores_has_no_nan_rows():
    """``masked_fill(~mask, finfo(q.dtype).min)`` then ``softmax(scores.float())``: right in float32. In
    float64 the fill overflowed to -inf in the cast and the fully masked probe reported a false ATT303."""
    findings, result, checks = checked_target(FIXTURES / "correct" / "mask_fill_dtype_min_softmax_float.py")
    assert (result.status, findings) == ("passed", [])
    assert checks["fully-masked-rows"].status == "passed"
    assert "NaN" not in checks["fully-masked-rows"].detail


def test_user_code_sees_float32_tensors_weights_and_default_dtype(tmp_path):
    """... in full float32 products (no TF32 on a GPU), and the process's own settings come back after."""
    tf32 = torch.backends.cudnn.allow_tf32
    path = write_module(
        tmp_path,
        """
        import torch
        from torch import nn

        class Float32Only(nn.Module):
            def __init__(self, d_model, n_heads):
                super().__init__()
                self.n_heads = n_heads
                self.qkv = nn.Linear(d_model, 3 * d_model)
                self.out = nn.Linear(d_model, d_model)

            def forward(self, x):
                if torch.float64 in (x.dtype, self.qkv.weight.dtype):  # float16/bfloat16: the low-precision runs
                    raise TypeError(f"checker tell: {x.dtype}, {self.qkv.weight.dtype}")
                if torch.get_default_dtype() != torch.float32 or torch.zeros(1).dtype != torch.float32:
                    raise TypeError("checker tell: default dtype")
                if torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32:
                    raise TypeError("TF32 products would make the verdict depend on the device")
                b, s, d = x.shape
                q, k, v = (t.view(b, s, self.n_heads, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
                out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
                return self.out(out.transpose(1, 2).reshape(b, s, d))
        """,
    )
    findings, result, checks = checked_target(path)
    assert (result.status, findings) == ("passed", []), [(c.name, c.detail) for c in result.checks]
    assert "max error" in checks["reference"].detail
    assert checks["low-precision-float16"].status == "passed"
    assert torch.backends.cudnn.allow_tf32 == tf32


def test_the_float32_tolerance_is_the_catalogues_floor_at_the_probes_sizes():
    """max(1e-5, 2x the naive float32 error): measured here at every size the probes use, the naive error
    is far below half the floor, so ``precision.TOLERANCE`` is the floor."""
    assert precision.TOLERANCE == ABSOLUTE_FLOOR
    rng = np.random.default_rng(0)
    worst = 0.0
    for sizes in [DEFAULT, *(drawn(seed) for seed in range(8))]:
        shape = (sizes.batch, 4, max(sizes.seq_self, sizes.seq_k), 8)
        q, k, v = (torch.from_numpy(rng.standard_normal(shape).astype(np.float32)) for _ in range(3))

        def attend(q, k, v):
            return torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1) @ v

        exact = attend(q.double(), k.double(), v.double())
        worst = max(worst, float((attend(q, k, v).double() - exact).abs().max()))
    assert 0 < worst < ABSOLUTE_FLOOR / 10
