"""Probe building blocks on random shapes and mask patterns (hypothesis), and the tolerance rule."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from attncheck.dynamic.binding.mask_docs import documented_convention, documented_shape, mask_comments
from attncheck.dynamic.probes.masks import CONVENTIONS, SHAPES, _mask_in, _shaped
from attncheck.dynamic.reference import mha as reference
from attncheck.dynamic.reference.tolerance import max_error, tolerance

sizes = st.tuples(
    st.integers(1, 3), st.integers(1, 4), st.integers(1, 6), st.integers(1, 6), st.integers(1, 8)
)


def keep_masks(b: int, q: int, k: int):
    # every query keeps at least one key: fully masked rows are judged separately
    return arrays(bool, (b, q, k)).map(lambda m: m | (np.arange(k) == 0))


@settings(max_examples=25, deadline=None)
@given(sizes, st.data())
def test_every_mask_convention_and_shape_means_the_same_keep_mask(size, data):
    b, _, q, k, _ = size
    keep = data.draw(keep_masks(b, q, k))
    scores = torch.randn(b, 1, q, k, dtype=torch.float64)
    for shape in SHAPES:
        expected = _shaped(keep, shape if shape.endswith("qk") else "b11k")
        expected = torch.from_numpy(
            np.broadcast_to(expected if expected.ndim == 4 else expected[:, None], (b, 1, q, k)).copy()
        )
        for convention in CONVENTIONS:
            mask = torch.from_numpy(np.asarray(_mask_in(_shaped(keep, shape), convention)))
            if shape == "bk":
                mask = mask[:, None, None, :]
            elif shape == "bqk":
                mask = mask[:, None]
            if convention == "keep":
                applied = scores.masked_fill(~mask, float("-inf"))
            elif convention == "blocked":
                applied = scores.masked_fill(mask, float("-inf"))
            else:
                applied = scores + mask
            weights = applied.softmax(-1)
            assert torch.all(weights[~expected] < 1e-300)


@settings(max_examples=25, deadline=None)
@given(sizes, st.data())
def test_reference_ignores_masked_keys_and_other_batches(size, data):
    b, h, q, k, dh = size
    keep = torch.from_numpy(data.draw(keep_masks(b, q, k))).unsqueeze(1)
    qt, kt, vt = (torch.randn(b, h, n, dh, dtype=torch.float64) for n in (q, k, k))
    out = reference.sdpa(qt, kt, vt, keep)
    hidden = ~keep.expand(b, h, q, k).any(dim=2)  # keys no query of that head may see
    noisy_k, noisy_v = kt.clone(), vt.clone()
    noisy_k[hidden] += 5.0
    noisy_v[hidden] -= 3.0
    assert max_error(reference.sdpa(qt, noisy_k, noisy_v, keep), out) < 1e-12
    if b > 1:
        qt2 = qt.clone()
        qt2[1:] += 1.0
        assert max_error(reference.sdpa(qt2, kt, vt, keep)[:1], out[:1]) < 1e-12


def test_max_error_skips_rows_and_treats_nan_as_infinite():
    out = torch.zeros(2, 3, 4, dtype=torch.float64)
    ref = out.clone()
    out[1, 2] = float("nan")
    assert max_error(out, ref) == float("inf")
    skip = torch.zeros(2, 3, dtype=torch.bool)
    skip[1, 2] = True
    assert max_error(out, ref, skip) == 0.0
    assert max_error(out, ref[:, :2]) == float("inf")


def test_tolerance_follows_the_catalogue():
    assert tolerance(torch.float64, 0.0) == 1e-5
    assert tolerance(torch.float32, 1e-4) == 2e-4
    assert tolerance(torch.float16, 1e-3) > 2e-3


def test_documented_convention():
    assert documented_convention("mask: True = keep (attend to it)") == "keep"
    assert documented_convention("attn_mask: True = masked, as in nn.MultiheadAttention") == "blocked"
    assert documented_convention("1 marks padding tokens") == "blocked"
    assert documented_convention("Multi-head attention.") is None


def test_an_additive_mask_is_read_as_documented_in_timm():
    assert documented_convention("mask: (0/-inf) mask with shape of (num_windows, Wh*Ww, Wh*Ww) or None") == "additive"
    assert documented_convention("attn_mask: an additive mask, 0 / -inf") == "additive"
    assert documented_convention("scores / sqrt(d); -inf where the causal mask blocks") is None


def test_documented_convention_in_chinese_and_in_comments_about_the_mask():
    assert documented_convention("mask 中 True/1 表示需要屏蔽的位置") == "blocked"
    assert documented_convention("mask: 1 表示保留的位置, 0 表示填充") == "keep"
    # other comments of the class say nothing about the mask's values
    assert mask_comments("pad 1 token for the cls\nmask: True = masked\nscale by 1/sqrt(d)") == "mask: True = masked"
    assert documented_convention(mask_comments("pad 1 token for the cls")) is None


def test_documented_shape_in_brackets():
    docs = "mask: [batch_size, seq_len_q, seq_len_k] 或 [batch_size, 1, seq_len_k]"
    assert documented_shape(docs, "mask") == "bqk"
    assert documented_shape("mask: (batch, 1, 1, seq_k)", "mask") == "b11k"
    assert documented_shape("mask[:, :, n:] = 0", "mask") is None  # indexing, not a shape
