"""Whose fault is a crash: the user's code, or an input the harness only guessed.

ATT901 says "the forward pass raises for an input it promises to accept". The promise is
the code's signature, names, annotations and documentation, or a declaration in
pyproject.toml. Where the harness had to guess (the input width of a class with no width
argument, the layout a convolution reads, the rank, a required mask nothing documents) and
the crash shows the guess was wrong, the target is skipped with why, never ATT901.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from attncheck.dynamic.binding.bind import Binding
from attncheck.dynamic.diagnosis import crashes

_WIDTH_MISMATCH = re.compile(
    r"mat1 and mat2 shapes cannot be multiplied|normalized_shape|size of tensor a|expanded size of the tensor"
)
_SHAPES = re.compile(
    r"size of (the )?tensor|shape|cannot be multiplied|out of range|out of bounds|invalid for input"
)
_CHANNELS = re.compile(r"to have \d+ channels")
_RANK = re.compile(r"number of dimensions|too many indices|Dimension out of range")
_WRONG_KIND = re.compile(r"'(float|int|NoneType|bool)' object is not (callable|subscriptable|iterable)")


SELF_ATTENTION_ONLY = (
    "query and key lengths that differ: the function builds its mask from one of them, as a self-attention "
    "function does"
)
"""The guess behind a bare function's crash on a cross-attention call; ``runner`` then runs it again on
inputs of one length, as the self-attention function it is."""


def harness_guess(
    binding: Binding, error: Mapping[str, Any], line_text: str, cross_lengths: tuple[int, int] = (0, 0)
) -> str | None:
    """What the harness guessed that this crash shows wrong; None when the input was promised
    (``cross_lengths``: the query and key lengths a bare function was given)."""
    message = str(error.get("message", ""))
    forward = binding.forward
    if _CHANNELS.search(message):
        return "the input layout (batch, seq, dim), where the code's convolution reads channels first"
    if "values to unpack" in message and re.search(r"\.shape\b|\.size\(\)", line_text):
        return "the input's rank, which the code unpacks differently"
    if forward is not None and forward.image and (_SHAPES.search(message) or _RANK.search(message)):
        return f"the feature map's shape: the sequence laid out as a 1 x seq map ({forward.image})"
    three = [role for _, role in forward.roles] == ["query", "key", "value"] if forward else False
    if three and binding.target.is_class and not forward.per_head and _RANK.search(message):
        return "the inputs' rank: (batch, seq, dim) for a class called on query, key and value"
    if "'_CallerModule' object has no attribute" in message:
        return "the calling layer, which the harness stands in for with its head counts only"
    if _WRONG_KIND.search(message):
        return "the kind of an argument the code uses as another kind"
    if binding.style == "function" and _lengths_disagree(message, cross_lengths):
        return SELF_ATTENTION_ONLY
    if binding.width_guessed and _WIDTH_MISMATCH.search(message):
        return "the input width, which no constructor argument sets"
    config = next((c.config for c in binding.candidates if c.config), None)
    if config is not None and (_WIDTH_MISMATCH.search(message) or "'types.SimpleNamespace' object" in message):
        return (
            f"the {config['param']} object: the harness sizes only the fields it knows by name, and the others "
            "(an encoder's width, a field its own config class would add) keep their defaults or are missing"
        )
    by_use = binding.candidates[0].by_use if binding.candidates else ()
    if by_use and _SHAPES.search(message):
        values = ", ".join(f"{name}={binding.candidates[0].kwargs[name]}" for name in by_use)
        return f"constructor values chosen from how __init__ uses them ({values})"
    mask = forward.mask_name if forward else None
    undocumented = forward is not None and forward.mask_shape is None and binding.declared_mask is None
    if mask and forward.mask_required and undocumented and re.search(rf"\b{re.escape(mask)}\b", line_text):
        return f"the shape and convention of the required {mask}, which nothing documents"
    return None


def _lengths_disagree(message: str, cross_lengths: tuple[int, int]) -> bool:
    """A size mismatch between the query and the key length the harness chose for a bare function
    (``sizes.lengths``: they differ, so a cross-attention call is told apart); a function that only
    serves self-attention builds a (t, t) mask from one of them and cannot take that call."""
    sizes = set(crashes.broadcast_sizes(message) or ())
    return len(sizes) == 2 and sizes == set(cross_lengths)
