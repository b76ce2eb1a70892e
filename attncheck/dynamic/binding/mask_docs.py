"""What a target's documentation says about its mask: the convention and the shape.

A documented convention wins over a guess ("mask: (b, s) bool, True = attend" is a keep
mask), and a documented shape is tried as documented: a module that crashes on the input its
own docstring promises must not pass because another shape happened to work.
"""

from __future__ import annotations

import re
from typing import Literal

from attncheck.mask_wording import declared_blocked

MaskConvention = Literal["keep", "blocked", "additive"]
MaskShape = Literal["b11k", "bk", "bqk", "b1qk"]

_ABOUT_A_MASK = re.compile(r"mask|掩码|遮罩", re.IGNORECASE)


_ADDITIVE = re.compile(r"\(?\b0\s*/\s*-\s*inf\b|\badditive\s+(?:float\s+)?mask", re.IGNORECASE)
"""An additive mask as docstrings state it: timm's "mask: (0/-inf) mask", "an additive mask"."""


def documented_convention(docs: str) -> MaskConvention | None:
    """The mask convention a docstring states ("True = keep", "1 marks padding", "1 表示需要屏蔽",
    "(0/-inf) mask"), if it states exactly one: the wording is read as the static rule ATT304 reads it."""
    blocked = declared_blocked(docs)
    if blocked is None:
        return "additive" if _ADDITIVE.search(docs) else None
    return "blocked" if blocked == "ones" else "keep"


def mask_comments(comments: str) -> str:
    """The comment lines that speak of a mask: a class's other comments ("# pad 1 token") say
    nothing about its mask's values and must not be read as if they did."""
    return "\n".join(line for line in comments.splitlines() if _ABOUT_A_MASK.search(line))


_SHAPE = r"[(\[]([^()\[\]]*)[)\]]"  # (batch, src_len) or [batch_size, seq_len]
_BATCH_WORDS = re.compile(r"^(b|n|bs|bsz|batch|batch_size|nbatches|num_batches)$", re.IGNORECASE)


def documented_shape(docs: str, mask_name: str) -> MaskShape | None:
    """The shape the documentation gives ``mask_name`` (``(batch, src_len)`` is (b, k)), if it gives one."""
    match = re.search(rf"\b{re.escape(mask_name)}\b[^()\[\]\n]{{0,60}}{_SHAPE}", docs)
    if match is None:
        return None
    parts = [part.strip() for part in match.group(1).split(",") if part.strip()]
    if not parts or not _BATCH_WORDS.match(parts[0]):
        return None  # (seq, seq), (tgt_len, src_len): not a shape the harness tries
    if len(parts) == 2:
        return "bk"
    if len(parts) == 3:
        return "bqk"
    if len(parts) == 4 and parts[1] == "1":
        return "b11k" if parts[2] == "1" else "b1qk"
    return None


def documented_float(docs: str, mask_name: str) -> bool:
    """The documentation gives ``mask_name`` as a float 0/1 mask ("attn_mask: (b, s) float, 1 = attend"):
    its keep and blocked masks are passed as 1.0/0.0, not bool (``1.0 - mask`` raises on a bool)."""
    return re.search(rf"\b{re.escape(mask_name)}\b[^\n]{{0,80}}\bfloat", docs) is not None
