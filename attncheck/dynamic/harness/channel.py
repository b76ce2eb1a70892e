"""The pipe protocol between the parent and the child that runs user code.

The child's writable space (its home and /tmp) is a size-limited tmpfs inside its own mount
namespace, which the parent cannot see into; so nothing crosses as a file. The child inherits
three pipes (``ChildEnds``):

- ``request``: the parent writes one request frame, ``REQUEST_HEADER`` (the JSON's length, the
  inputs' length) then the request's JSON (with ``module_path``) then the inputs as safetensors.
  A child started early blocks on it while the parent still lints and plans.
- ``ready``: the child writes one byte once it has imported torch and is about to import the
  user's file, and closes it before user code runs: the time limit counts from that byte.
- ``replies``: for each unit the child finishes, a frame: ``FRAME_HEADER`` (kind, the JSON's
  length, the tensors' length), the JSON facts, the tensors as safetensors. When the entry has
  run to its end, a ``DONE`` frame. A frame cut off by the child's end is dropped, as a
  half-written file was before.

Only JSON and safetensors cross the boundary: no pickle, and the parent never reads the child's
stdout. Everything the parent reads is bounded and validated here, because the child is hostile
and the parent may be root: ``ReplyStream`` checks each frame's lengths in its header before it
keeps a byte of it (no frame over ``MAX_REPLY_JSON_BYTES`` + ``MAX_TENSOR_BYTES``, no more than
``MAX_TOTAL_BYTES`` in all, no more than ``MAX_REPLIES`` frames), and refuses the stream at the
first frame that breaks them; a tensor's shape is checked in the header before any array exists
(no 2**40-long empty tensors); every text in the facts is cut to ``MAX_TEXT_CHARS``, its
control characters escaped.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from attncheck.untrusted_text import shown

if TYPE_CHECKING:
    import numpy

# numpy and safetensors are imported where they are used: the parent starts children before it
# imports anything heavy, and importing this module must not delay that.

REQUEST_HEADER = struct.Struct("<IQ")  # the request JSON's length, the inputs' length
FRAME_HEADER = struct.Struct("<BIQ")  # kind, the facts JSON's length, the tensors' length
REPLY, DONE = 1, 2  # a frame's kind
READY_BYTE = b"R"

MAX_REPLIES = 4096
MAX_REPLY_JSON_BYTES = 1_000_000
MAX_TENSOR_BYTES = 256 * 1024 * 1024
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


@dataclass(frozen=True)
class ChildEnds:
    """The child's ends of its three pipes, as file descriptor numbers it inherited."""

    request: int
    replies: int
    ready: int

    def as_args(self) -> list[str]:
        return [str(self.request), str(self.replies), str(self.ready)]

    @classmethod
    def from_args(cls, args: list[str]) -> ChildEnds:
        request, replies, ready = (int(arg) for arg in args)
        return cls(request, replies, ready)


@dataclass
class Reply:
    """One unit the child finished: the JSON facts and the tensors it yielded."""

    facts: dict
    tensors: dict[str, numpy.ndarray]
    # name -> original torch dtype, for tensors widened to float32 to cross as numpy.
    source_dtypes: dict[str, str] = field(default_factory=dict)


def request_frame(request: dict, tensors: dict[str, numpy.ndarray]) -> bytes:
    """Parent side: the request and its input tensors, as the child reads them from its pipe."""
    import numpy
    import safetensors.numpy

    for name, array in tensors.items():
        if not isinstance(array, numpy.ndarray):
            raise TypeError(f"input {name!r} is a {type(array).__name__}, not a numpy array")
    text = json.dumps(request).encode()
    blob = safetensors.numpy.save({name: numpy.ascontiguousarray(array) for name, array in tensors.items()})
    return REQUEST_HEADER.pack(len(text), len(blob)) + text + blob


def read_request(fd: int) -> tuple[dict, bytes]:
    """Child side: the request and the inputs' safetensors bytes, read whole from ``fd``."""
    text_size, blob_size = REQUEST_HEADER.unpack(_read_exactly(fd, REQUEST_HEADER.size))
    return json.loads(_read_exactly(fd, text_size)), _read_exactly(fd, blob_size)


def _read_exactly(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError(f"the request ended {left} bytes short")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def reply_frame(text: bytes, blob: bytes) -> bytes:
    """Child side: one finished unit, its facts' JSON and its tensors' safetensors bytes."""
    return FRAME_HEADER.pack(REPLY, len(text), len(blob)) + text + blob


def done_frame(count: int) -> bytes:
    """Child side: the entry ran to its end after ``count`` replies."""
    text = json.dumps({"replies": count}).encode()
    return FRAME_HEADER.pack(DONE, len(text), 0) + text


class ReplyStream:
    """Parent side: the child's frames, cut out of the bytes as they arrive, each bounded first.

    ``feed`` takes what the pipe gave; ``replies`` validates the frames kept. After ``DONE``,
    bytes are ignored; after a refusal (``refused``), discarded: the caller ends the child.
    """

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.frames: list[tuple[bytes, bytes]] = []
        self.finished = False
        self.refused: str | None = None
        self.total = 0

    def feed(self, data: bytes) -> None:
        if self.finished or self.refused is not None:
            return
        self.buffer += data
        while self._cut_frame():
            pass

    def _cut_frame(self) -> bool:
        """Take one whole frame off the buffer; False when none is whole yet (or the stream is refused)."""
        if len(self.buffer) < FRAME_HEADER.size:
            return False
        kind, text_size, blob_size = FRAME_HEADER.unpack_from(self.buffer)
        problem = self._problem(kind, text_size, blob_size)
        if problem is not None:
            self.refused = f"reply {len(self.frames)} refused: {problem}"
            self.buffer.clear()
            return False
        end = FRAME_HEADER.size + text_size + blob_size
        if len(self.buffer) < end:
            return False
        text = bytes(self.buffer[FRAME_HEADER.size : FRAME_HEADER.size + text_size])
        blob = bytes(self.buffer[FRAME_HEADER.size + text_size : end])
        del self.buffer[:end]
        if kind == DONE:
            self.finished = True
            self.buffer.clear()
            return False
        self.total += text_size + blob_size
        self.frames.append((text, blob))
        return True

    def _problem(self, kind: int, text_size: int, blob_size: int) -> str | None:
        if kind not in (REPLY, DONE):
            return f"a frame of unknown kind {kind}"
        if len(self.frames) >= MAX_REPLIES:
            return f"more than {MAX_REPLIES} replies"
        if text_size > MAX_REPLY_JSON_BYTES:
            return f"its JSON is {text_size} bytes, over the limit of {MAX_REPLY_JSON_BYTES}"
        if blob_size > MAX_TENSOR_BYTES:
            return f"its tensors are {blob_size} bytes, over the limit of {MAX_TENSOR_BYTES}"
        if self.total + text_size + blob_size > MAX_TOTAL_BYTES:
            return f"the replies pass {MAX_TOTAL_BYTES} bytes in all"
        return None

    def replies(self) -> tuple[list[Reply], str | None]:
        """The replies in order, up to the first invalid one, and why the stream was refused (or None)."""
        replies: list[Reply] = []
        for index, (text, blob) in enumerate(self.frames):
            try:
                replies.append(_reply(text, blob))
            except ProtocolError as error:
                return replies, f"reply {index} refused: {error}"
        return replies, self.refused


def _reply(text: bytes, blob: bytes) -> Reply:
    try:
        facts = json.loads(text)
    except (ValueError, UnicodeDecodeError) as error:
        raise ProtocolError(f"invalid JSON ({error})") from None
    if not isinstance(facts, dict):
        raise ProtocolError("the reply is not a JSON object")
    facts = _capped_texts(facts)
    if not blob:
        return Reply(facts, {})
    tensors, source_dtypes = _load_tensors(blob)
    return Reply(facts, tensors, source_dtypes)


def _capped_texts(value: Any) -> Any:
    """The facts with every string cut to ``MAX_TEXT_CHARS``, nothing long comes back to a report,
    and every character but a newline that would act on a terminal escaped (``untrusted_text``):
    an exception message's ANSI escapes would erase the report's lines above it."""
    if isinstance(value, str):
        text = shown(value[:MAX_TEXT_CHARS], keep="\n")
        return text if max(len(value), len(text)) <= MAX_TEXT_CHARS else text[: MAX_TEXT_CHARS - 1] + "…"
    if isinstance(value, dict):
        return {_capped_texts(key): _capped_texts(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_capped_texts(item) for item in value]
    return value


def _header(blob: bytes) -> dict[str, Any]:
    """The safetensors header, with every tensor's shape checked before numpy sees it."""
    if len(blob) < 8:
        raise ProtocolError("its tensors are not safetensors (too short)")
    (length,) = struct.unpack("<Q", blob[:8])
    if length > min(MAX_HEADER_BYTES, len(blob) - 8):
        raise ProtocolError(f"its tensors are not safetensors (header of {length} bytes)")
    try:
        header = json.loads(blob[8 : 8 + length])
    except (ValueError, UnicodeDecodeError):
        raise ProtocolError("its tensors are not safetensors (header is not JSON)") from None
    if not isinstance(header, dict):
        raise ProtocolError("its tensors are not safetensors (header is not an object)")
    for key, entry in header.items():
        shape = entry.get("shape") if isinstance(entry, dict) and key != "__metadata__" else []
        if not isinstance(shape, list) or len(shape) > MAX_DIMS:
            raise ProtocolError(f"tensor {key[:40]!r} has a shape of more than {MAX_DIMS} axes")
        if not all(isinstance(size, int) and 0 <= size <= MAX_DIM for size in shape):
            raise ProtocolError(f"tensor {key[:40]!r} has an axis longer than {MAX_DIM}")
    return header


def _load_tensors(blob: bytes) -> tuple[dict[str, numpy.ndarray], dict[str, str]]:
    import safetensors
    import safetensors.numpy

    metadata = _header(blob).get("__metadata__") or {}
    try:
        tensors = safetensors.numpy.load(blob)
    except (TypeError, ValueError, KeyError, OSError, safetensors.SafetensorError) as error:
        raise ProtocolError(f"its tensors are not safetensors numpy can hold ({error})") from None
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
