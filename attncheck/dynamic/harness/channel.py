"""The file protocol between the parent and the child that runs user code.

In: ``request.json`` (the request, plus ``module_path``) and ``inputs.safetensors``.
Out: for each unit the child finishes, ``tensors-NNNN.safetensors`` then
``reply-NNNN.json``, each written to a temporary name and renamed, so a reply file
that exists is complete (the JSON is written last: it is the commit marker). When the
entry has run to its end the child writes ``done.json``. ``ready.json`` marks the moment the
child has imported torch and is about to import the user's file: the time limit counts from it.

Only JSON and safetensors cross the boundary: no pickle, and the parent never reads
the child's stdout. Everything the parent reads is bounded and validated here, because the
child is hostile and the parent may be root: a reply is opened without following a link
(``O_NOFOLLOW``; a link to ``/proc/self/mem`` is refused, not read), must be a regular file, is
read up to its limit and no further; a tensor's shape is checked in the header before any
array exists (no 2**40-long empty tensors); every text in the facts is cut to ``MAX_TEXT_CHARS``.
Files it does not expect are ignored.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import struct
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
MAX_TEXT_CHARS = 500  # of any string in a reply's facts (exception messages included)
MAX_HEADER_BYTES = 1_000_000  # a safetensors header
MAX_DIMS = 8
MAX_DIM = 1 << 24  # elements along one axis

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
    os.chmod(workdir / INPUTS, 0o644)  # written 0600; the child may run under a uid of its own
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
        try:
            read = _read_reply(workdir / reply_name(index), workdir / tensors_name(index), MAX_TOTAL_BYTES - total)
        except ProtocolError as error:
            return replies, f"reply {index} refused: {error}"
        if read is None:
            return replies, None
        reply, size = read
        total += size
        replies.append(reply)
    return replies, f"more than {MAX_REPLIES} replies; the rest were ignored"


def finished(workdir: Path) -> bool:
    """Whether the child reported that its entry ran to the end (a regular file, not a link to one)."""
    try:
        return stat.S_ISREG(os.lstat(workdir / DONE).st_mode)
    except OSError:
        return False


def _read_reply(json_path: Path, tensor_path: Path, budget: int) -> tuple[Reply, int] | None:
    """One reply and its size in bytes; None when its JSON file does not exist."""
    data = _read_bounded(json_path, min(MAX_REPLY_JSON_BYTES, budget))
    if data is None:
        return None
    try:
        facts = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise ProtocolError(f"invalid JSON ({error})") from None
    if not isinstance(facts, dict):
        raise ProtocolError("the reply is not a JSON object")
    facts = _capped_texts(facts)
    blob = _read_bounded(tensor_path, min(MAX_TENSOR_FILE_BYTES, budget - len(data)))
    if blob is None:
        return Reply(facts, {}), len(data)
    tensors, source_dtypes = _load_tensors(blob, tensor_path.name)
    return Reply(facts, tensors, source_dtypes), len(data) + len(blob)


def _read_bounded(path: Path, limit: int) -> bytes | None:
    """The bytes of a regular file the child wrote, at most ``limit``; None when it is absent.

    Never follows a link, never blocks on a FIFO, never reads a device or ``/proc`` file.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        reason = "is a symbolic link" if error.errno == errno.ELOOP else f"cannot be opened ({error.strerror})"
        raise ProtocolError(f"{path.name} {reason}") from None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise ProtocolError(f"{path.name} is not a regular file")
        if status.st_size > limit:
            raise ProtocolError(f"{path.name} is {status.st_size} bytes, over the limit of {limit}")
        with os.fdopen(os.dup(descriptor), "rb") as handle:
            data = handle.read(limit + 1)
    finally:
        os.close(descriptor)
    if len(data) > limit:
        raise ProtocolError(f"{path.name} grew past the limit of {limit} bytes")
    return data


def _capped_texts(value: Any) -> Any:
    """The facts with every string cut to ``MAX_TEXT_CHARS``: nothing long comes back to a report."""
    if isinstance(value, str):
        return value if len(value) <= MAX_TEXT_CHARS else value[: MAX_TEXT_CHARS - 1] + "…"
    if isinstance(value, dict):
        return {_capped_texts(key): _capped_texts(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_capped_texts(item) for item in value]
    return value


def _header(blob: bytes, name: str) -> dict[str, Any]:
    """The safetensors header, with every tensor's shape checked before numpy sees it."""
    if len(blob) < 8:
        raise ProtocolError(f"{name} is not a safetensors file (too short)")
    (length,) = struct.unpack("<Q", blob[:8])
    if length > min(MAX_HEADER_BYTES, len(blob) - 8):
        raise ProtocolError(f"{name} is not a safetensors file (header of {length} bytes)")
    try:
        header = json.loads(blob[8 : 8 + length])
    except (ValueError, UnicodeDecodeError):
        raise ProtocolError(f"{name} is not a safetensors file (header is not JSON)") from None
    if not isinstance(header, dict):
        raise ProtocolError(f"{name} is not a safetensors file (header is not an object)")
    for key, entry in header.items():
        shape = entry.get("shape") if isinstance(entry, dict) and key != "__metadata__" else []
        if not isinstance(shape, list) or len(shape) > MAX_DIMS:
            raise ProtocolError(f"{name}: tensor {key[:40]!r} has a shape of more than {MAX_DIMS} axes")
        if not all(isinstance(size, int) and 0 <= size <= MAX_DIM for size in shape):
            raise ProtocolError(f"{name}: tensor {key[:40]!r} has an axis longer than {MAX_DIM}")
    return header


def _load_tensors(blob: bytes, name: str) -> tuple[dict[str, numpy.ndarray], dict[str, str]]:
    import safetensors
    import safetensors.numpy

    metadata = _header(blob, name).get("__metadata__") or {}
    try:
        tensors = safetensors.numpy.load(blob)
    except (TypeError, ValueError, KeyError, OSError, safetensors.SafetensorError) as error:
        raise ProtocolError(f"{name} is not a safetensors file numpy can hold ({error})") from None
    if not isinstance(metadata, dict):
        metadata = {}
    source_dtypes = {
        key[len(ORIGINAL_DTYPE_PREFIX) :]: value
        for key, value in metadata.items()
        if key.startswith(ORIGINAL_DTYPE_PREFIX) and key[len(ORIGINAL_DTYPE_PREFIX) :] in tensors
    }
    return tensors, source_dtypes


def json_safe(value: Any) -> Any:
    """Facts as JSON can carry them: unknown objects become their ``repr``."""
    return json.loads(json.dumps(value, default=repr, allow_nan=True))
