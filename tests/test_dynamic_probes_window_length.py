"""The window-length probe: a declared window or chunk is judged on 16 tokens, where it shows.

On the plain run's 7 tokens a window of 7 or more keys equals plain causal attention, so these
fixtures pass every other check; only the long run names their mistake (and before this probe,
nothing did). A class built from a config gets a window of 3 keys from the binding, which the
plain run already misses: the long run then names the mistake behind that mismatch.
"""

from __future__ import annotations

from pathlib import Path

from tests.dynamic_support import FIXTURES, checked_target, write_module

WINDOWED = """
import torch
import torch.nn as nn


class Windowed(nn.Module):
    SETTING

    def __init__(self, d_model: int = 32, n_heads: int = 4INIT):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        STORE
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, MASK) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / self.head_dim**0.5
        distance = torch.arange(s)[:, None] - torch.arange(s)[None, :]
        keep = (distance >= 0) & (distance < WINDOW)
        scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
        if attention_mask is not None:
            scores = scores + attention_mask
        return self.out((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, d))
"""


def _windowed(
    tmp_path: Path,
    setting: str = "",
    init: str = ", sliding_window: int = 8",
    store: str = "self.sliding_window = sliding_window",
    window: str = "self.sliding_window",
    mask: str = "attention_mask: torch.Tensor | None = None",
) -> Path:
    text = WINDOWED.replace("SETTING", setting or "pass").replace("INIT", init).replace("STORE", store)
    text = text.replace("WINDOW", window).replace("MASK", mask)
    if "attention_mask" not in mask:
        added = "        if attention_mask is not None:\n            scores = scores + attention_mask\n"
        text = text.replace(added, "")
    return write_module(tmp_path, text)



def test_a_window_longer_than_the_plain_run_passes_on_sixteen_tokens(tmp_path):
    findings, result, checks = checked_target(_windowed(tmp_path))
    assert (result.status, findings) == ("passed", [])
    assert checks["window-length"].status == "passed"
    detail = checks["window-length"].detail
    assert "sliding_window = 8 on 16 tokens: closest reading sliding window 8 (W keys)" in detail


def test_a_window_of_the_config_default_4096_is_set_smaller_for_thechecked_target():
    # the binding builds the config with a window of 3 keys, which shows on the plain run's 7 tokens too
    findings, result, checks = checked_target(FIXTURES / "correct" / "variant_sliding_window_long.py")
    assert (result.status, findings) == ("passed", [])
    assert "sliding_window = 3 on 16 tokens: closest reading sliding window 3" in checks["window-length"].detail


def test_an_ignored_window_is_att305():
    findings, _, checks = checked_target(FIXTURES / "buggy" / "window_ignored_att305.py")
    assert [f.code for f in findings] == ["ATT305"]  # the plain mismatch gives way to the named mistake
    assert checks["window-length"].status == "failed"
    assert "plain causal attention: the declared sliding_window = 3 is ignored" in findings[0].message


def test_a_window_off_by_one_is_att305_with_the_keys_it_keeps():
    findings, _, checks = checked_target(FIXTURES / "buggy" / "window_off_by_one_att305.py")
    assert [f.code for f in findings] == ["ATT305"]
    assert "the plain run misses the reference" in checks["window-length"].detail
    assert "a window of 2 keys: one fewer than sliding_window = 3 allows" in findings[0].message
    assert "Fix: keep key j for query i when i - sliding_window < j <= i" in findings[0].message


def test_a_window_measured_on_the_future_side_is_att305(tmp_path):
    path = _windowed(tmp_path, mask="unused: bool = False")
    path.write_text(path.read_text().replace("(distance < self.sliding_window)", "(-distance < self.sliding_window)"))
    findings, _, checks = checked_target(path)
    assert [f.code for f in findings] == ["ATT305"]
    assert "is ignored (or measured on the future side, j - i < W" in findings[0].message
    assert checks["causal"].status == "passed"


def test_an_ignored_chunk_is_att305():
    findings, _, checks = checked_target(FIXTURES / "buggy" / "chunk_ignored_att305.py")
    assert [f.code for f in findings] == ["ATT305"]
    assert checks["window-length"].status == "failed" and checks["causal"].status == "passed"
    assert "the declared attention_chunk_size = 8 is ignored" in findings[0].message
    assert "i // attention_chunk_size == j // attention_chunk_size" in findings[0].message


def _skipped_window(path: Path) -> str:
    """The window-length check's detail where it is skipped and the target passes with no finding."""
    findings, result, checks = checked_target(path)
    assert findings == [] and result.status == "passed"
    assert checks["window-length"].status == "skipped"
    return checks["window-length"].detail


def test_a_window_the_module_leaves_to_its_mask_argument_is_skipped(tmp_path):
    detail = _skipped_window(_windowed(tmp_path, window="s"))
    assert "forward takes a mask, through which the caller may pass the window" in detail


def test_a_window_that_cannot_be_set_smaller_is_skipped_with_why(tmp_path):
    path = _windowed(tmp_path, setting="sliding_window = 4096", init="", store="pass", mask="unused: bool = False")
    assert "sliding_window = 4096 is not shorter than the 16 tokens the probe runs" in _skipped_window(path)


def test_no_window_no_check(tmp_path):
    path = _windowed(tmp_path, init="", store="pass", window="s + 1", mask="unused: bool = False")
    findings, result, checks = checked_target(path)
    assert (result.status, findings) == ("passed", [])
    assert "window-length" not in checks
