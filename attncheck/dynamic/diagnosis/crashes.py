"""Name the mistake behind a forward pass that raised (instead of the generic ATT901).

Some mistakes only ever show as an exception, and torch's message plus the line
of the user's file that raised are enough to name them: ``view`` on a transposed
tensor (ATT106), ``torch.sqrt`` on a Python number (ATT204), rotary cos/sin of the
wrong width failing to broadcast against q/k (ATT403), and a float16 mask fill
that overflows (ATT302).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ROPE_LINE = re.compile(r"rotary|rope|\bcos\b|\bsin\b|cos_|sin_|freqs|rotate", re.IGNORECASE)
# A broadcast between two sizes, as the CPU kernels say it and as CUDA's (SDPA's mask expansion) does.
_BROADCAST = re.compile(
    r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)"
    r"|expanded size of the tensor \((\d+)\) must match the existing size \((\d+)\)"
)


def broadcast_sizes(message: str) -> tuple[int, int] | None:
    """The two sizes a failed broadcast names (on either device's wording), or None."""
    found = _BROADCAST.search(message)
    if found is None:
        return None
    first, second = (int(size) for size in found.groups() if size is not None)
    return first, second


@dataclass(frozen=True)
class Crash:
    """A classified exception: the catalogue code and a message that says what, why and the fix."""

    code: str
    message: str


def classify(error_type: str, message: str, line_text: str, head_dim: int | None = None) -> Crash | None:
    """The specific code for a forward exception, or None when only ATT901 fits.

    ``line_text`` is the source line of the user's file that raised ('' when unknown).
    """
    where = f" at `{line_text.strip()}`" if line_text.strip() else ""
    if "view size is not compatible" in message:
        return Crash(
            "ATT106",
            f"`.view` on a transposed (non-contiguous) tensor raised {error_type}: {message}{where}. "
            "transpose() only changes strides, and view() needs contiguous memory. "
            "Fix: .transpose(1, 2).contiguous().view(...) or .reshape(...).",
        )
    if "sqrt()" in message and "must be Tensor" in message:
        return Crash(
            "ATT204",
            f"torch.sqrt was called on a Python number and raised {error_type}: {message}{where}. "
            "torch.sqrt only takes tensors. Fix: math.sqrt(head_dim) (or head_dim ** 0.5).",
        )
    broadcast = broadcast_sizes(message)
    if broadcast and _ROPE_LINE.search(line_text):
        q_width, table_width = broadcast
        expected = f"; head_dim is {head_dim}" if head_dim else ""
        return Crash(
            "ATT403",
            f"the rotary cos/sin do not fit q/k: {error_type}: {message}{where} "
            f"(q/k have {q_width} dims on that axis, cos/sin {table_width}{expected}). "
            "cos and sin must be built with the width of one head (rotary_dim), not half of it or d_model. "
            "Fix: emb = torch.cat((freqs, freqs), dim=-1) with freqs over arange(0, head_dim, 2).",
        )
    if re.search(r"cannot be converted to (type )?c10::(Half|BFloat16) without overflow", message):
        return Crash(
            "ATT302",
            f"the mask fill value overflows low precision: {error_type}: {message}{where}. "
            "-1e9 does not fit in float16 (max 65504). Fix: masked_fill(mask, torch.finfo(scores.dtype).min).",
        )
    return None
