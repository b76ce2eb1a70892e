"""What a target's documentation says about its mask: the convention and the shape.

A documented convention wins over a guess ("mask: (b, s) bool, True = attend" is a keep
mask), and a documented shape is tried as documented: a module that crashes on the input its
own docstring promises must not pass because another shape happened to work.
"""

from __future__ import annotations

import re
from typing import Literal

MaskConvention = Literal["keep", "blocked", "additive"]
MaskShape = Literal["b11k", "bk", "bqk", "b1qk"]

_KEEP_DOC = re.compile(
    r"(true|1|ones?)\s*(?:=|:|->|means|marks|for|indicates|is|are)?\s*(?:the\s+)?(?:positions?\s+|tokens?\s+|keys?\s+)?"
    r"(?:to\s+|that\s+(?:are\s+|should\s+be\s+)?)?(keep|kept|attend|visible|valid|allowed|real)",
    re.IGNORECASE,
)
_BLOCKED_DOC = re.compile(
    r"(true|1|ones?)\s*(?:=|:|->|means|marks|for|indicates|is|are)?\s*(?:the\s+)?(?:positions?\s+|tokens?\s+|keys?\s+)?"
    r"(?:to\s+|that\s+(?:are\s+|should\s+be\s+)?)?(?:be\s+)?(mask|ignor|block|pad|hidden|not\s+attend|drop)",
    re.IGNORECASE,
)


def documented_convention(docs: str) -> MaskConvention | None:
    """The mask convention a docstring states ("True = keep", "1 marks padding"...), if exactly one."""
    keep, blocked = bool(_KEEP_DOC.search(docs)), bool(_BLOCKED_DOC.search(docs))
    if keep == blocked:
        return None
    return "keep" if keep else "blocked"


_SHAPE = r"\(([^()]*)\)"
_BATCH_WORDS = re.compile(r"^(b|n|bs|bsz|batch|batch_size|nbatches|num_batches)$", re.IGNORECASE)


def documented_shape(docs: str, mask_name: str) -> MaskShape | None:
    """The shape the documentation gives ``mask_name`` (``(batch, src_len)`` is (b, k)), if it gives one."""
    match = re.search(rf"\b{re.escape(mask_name)}\b[^()\n]{{0,60}}{_SHAPE}", docs)
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
