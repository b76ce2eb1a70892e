"""The file protocol between the parent and the child that runs user code.

In: ``request.json`` (the request, plus ``module_path``) and ``inputs.safetensors``.
Out: for each unit the child finishes, ``tensors-NNNN.safetensors`` then
``reply-NNNN.json``, each written to a temporary name and renamed, so a reply file
that exists is complete (the JSON is written last: it is the commit marker). When the
entry has run to its end the child writes ``done.json``. ``ready.json`` marks the moment the
child has imported torch and is about to import the user's file: the time limit counts from it.

Only JSON and safetensors cross the boundary: no pickle, and the parent never reads
the child's stdout. Everything the parent reads is bounded and validated here;
files it does not expect are ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy

# numpy and safetensors are imported where they are used: the parent starts children before it
# imports anything heavy, and importing this module must not delay that.

REQUEST = "request.json"
INPUTS = "inputs.safetensors"
DONE = "done.json"
READY = "ready.json"  # written by the child once torch is imported, just before it imports user code

MAX_REPLIES = 4096
MAX_REPLY_JSON_BYTES = 1_000_000
MAX_TENSOR_FILE_BYTES = 256 * 1024 * 1024
MAX_TOTAL_BYTES = 1024 * 1024 * 1024

# Non-numpy dtypes the child widens exactly to float32 before writing; the original
# dtype travels in the safetensors metadata.
WIDENED_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
ORIGINAL_DTYPE_PREFIX = "dtype:"


class ProtocolError(Exception):
    """A reply that breaks the protocol; its message is one line for the user."""


@dataclass
class Reply:
    """One unit the child finished: the JSON facts and the tensors it yielded."""

    facts: dict
    tensors: dict[str, numpy.ndarray]
    # name -> original torch dtype, for tensors widened to float32 to cross as numpy.
    source_dtypes: dict[str, str] = field(default_factory=dict)


def reply_name(index: int) -> str:
    return f"reply-{index:04d}.json"


def tensors_name(index: int) -> str:
    return f"tensors-{index:04d}.safetensors"


def write_request(workdir: Path, request: dict, tensors: dict[str, numpy.ndarray]) -> None:
    """Parent side: the request and its input tensors, as the child will read them."""
    import numpy
    import safetensors.numpy

    for name, array in tensors.items():
        if not isinstance(array, numpy.ndarray):
            raise TypeError(f"input {name!r} is a {type(array).__name__}, not a numpy array")
    text = json.dumps(request)
    contiguous = {name: numpy.ascontiguousarray(array) for name, array in tensors.items()}
    safetensors.numpy.save_file(contiguous, str(workdir / INPUTS))
    # The request goes last, by rename: a child started early waits for it, and never reads half of it.
    partial = workdir / f".{REQUEST}.partial"
    partial.write_text(text, encoding="utf-8")
    partial.replace(workdir / REQUEST)


def read_replies(workdir: Path) -> tuple[list[Reply], str | None]:
    """Parent side: the replies in order, up to the first missing or invalid one.

    Returns the replies and, when a reply was refused, the one-line reason.
    """
    replies: list[Reply] = []
    total = 0
    for index in range(MAX_REPLIES):
        json_path = workdir / reply_name(index)
        if not json_path.is_file():
            return replies, None
        try:
            reply, size = _read_reply(json_path, workdir / tensors_name(index), MAX_TOTAL_BYTES - total)
        except ProtocolError as error:
            return replies, f"reply {index} refused: {error}"
        total += size
        replies.append(reply)
    return replies, f"more than {MAX_REPLIES} replies; the rest were ignored"


def finished(workdir: Path) -> bool:
    """Whether the child reported that its entry ran to the end."""
    return (workdir / DONE).is_file()


def _read_reply(json_path: Path, tensor_path: Path, budget: int) -> tuple[Reply, int]:
    size = _bounded_size(json_path, min(MAX_REPLY_JSON_BYTES, budget))
    try:
        facts = json.loads(json_path.read_bytes())
    except (ValueError, UnicodeDecodeError) as error:
        raise ProtocolError(f"invalid JSON ({error})") from None
    if not isinstance(facts, dict):
        raise ProtocolError("the reply is not a JSON object")
    if not tensor_path.is_file():
        return Reply(facts, {}), size
    size += _bounded_size(tensor_path, min(MAX_TENSOR_FILE_BYTES, budget - size))
    tensors, source_dtypes = _load_tensors(tensor_path)
    return Reply(facts, tensors, source_dtypes), size


def _bounded_size(path: Path, limit: int) -> int:
    size = path.stat().st_size
    if size > limit:
        raise ProtocolError(f"{path.name} is {size} bytes, over the limit of {limit}")
    return size


def _load_tensors(path: Path) -> tuple[dict[str, numpy.ndarray], dict[str, str]]:
    import safetensors
    import safetensors.numpy

    try:
        with safetensors.safe_open(str(path), framework="numpy") as handle:
            metadata = handle.metadata() or {}
        tensors = safetensors.numpy.load_file(str(path))
    except (TypeError, ValueError, OSError, safetensors.SafetensorError) as error:
        raise ProtocolError(f"{path.name} is not a safetensors file numpy can hold ({error})") from None
    source_dtypes = {
        key[len(ORIGINAL_DTYPE_PREFIX) :]: value
        for key, value in metadata.items()
        if key.startswith(ORIGINAL_DTYPE_PREFIX) and key[len(ORIGINAL_DTYPE_PREFIX) :] in tensors
    }
    return tensors, source_dtypes


def json_safe(value: Any) -> Any:
    """Facts as JSON can carry them: unknown objects become their ``repr``."""
    return json.loads(json.dumps(value, default=repr, allow_nan=True))
