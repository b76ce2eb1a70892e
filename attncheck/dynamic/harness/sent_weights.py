"""The weights the parent gives a module, and the parent's check that a reply used only those.

A verdict must rest on data the child cannot shape. The inputs are the parent's; the weights are
made the parent's too: the child loads into every projection weight and bias (and every other
randomly initialised matrix) the values ``values(seed, name, shape)`` draws from the request's
seed, before the first forward. Both sides draw them with this one function, so the parent knows
them without the child telling it (the seed is the parent's: ``attncheck grade`` draws it per run).

The reference is computed from the weights the reply reports (``layer{i}/weight`` and ``/bias``),
so the parent checks every one of them against those values (``foreign``): each row of a reported
weight must be a row of a sent matrix (in any layout: transposed, a packed block, a head), each
bias a run of a sent vector or a constant (a zero bias the module chose). A module that rescales
its weights before or after a forward, or user code that patches the executor or the recorder to
report other weights, then gains nothing: its output is judged against the reference of the
weights it was given, or the target ends in an error.

Parameters initialised to one value (zero position biases, norm scales, gates) keep it: they are
the module's design, not random draws, and the reference does not read them as projections.
numpy is imported where it is used (the parent imports this module before anything heavy).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy

SENT = "sent"  # the reply's key: {parameter name: shape} of every parameter loaded with sent values
# The type of the error the child reports when a call left a parameter other than it was sent
# (``inside.executor.ParametersChangedError``): the module cannot be judged, whichever binding ran.
PARAMETERS_CHANGED = "ParametersChangedError"
MAX_SENT_ELEMENTS = 1 << 22  # in all parameters of one reply: the parent draws them again
MAX_SENT_DIMS = 8
_SEED_MASK = (1 << 63) - 1


def values(seed: int, name: str, shape: Iterable[int]) -> numpy.ndarray:
    """The values sent for parameter ``name`` of ``shape``: uniform within ±1/sqrt(fan-in), the range
    of ``nn.Linear``'s own initialisation, so the module sees weights of the usual size; rounded to
    float32, the dtype the module runs in, so that a parameter holds exactly the values drawn."""
    import numpy

    dims = tuple(int(size) for size in shape)
    fan_in = math.prod(dims[1:]) if len(dims) > 1 else (dims[0] if dims else 1)
    bound = 1.0 / math.sqrt(max(fan_in, 1))
    generator = numpy.random.default_rng([seed & _SEED_MASK, zlib.crc32(name.encode("utf-8"))])
    return generator.uniform(-bound, bound, dims).astype(numpy.float32).astype(numpy.float64)


def foreign(facts: Mapping[str, Any], tensors: Mapping[str, Any], seed: int) -> str | None:
    """Why the reply's reported projections are not made of the weights sent; None when they are.

    ``facts["layers"]`` and the tensors ``layer{i}/weight`` / ``layer{i}/bias`` are what the
    reference will be computed from; ``facts["sent"]`` names the parameters that got sent values.
    """
    layers = facts.get("layers") or []
    if not layers:
        return None
    import numpy

    claimed = facts.get(SENT) or {}
    shapes = list(claimed.items())
    if sum(math.prod(shape) for _, shape in shapes) > MAX_SENT_ELEMENTS or any(
        len(shape) > MAX_SENT_DIMS for _, shape in shapes
    ):
        return f"it names more than {MAX_SENT_ELEMENTS} sent weights"
    rows: set[bytes] = set()
    vectors: list[bytes] = []
    for name, shape in shapes:
        drawn = values(seed, name, shape)
        vectors.append(drawn.reshape(-1).tobytes())
        rows.update(_rows(drawn))
    for index, layer in enumerate(layers):
        weight = numpy.asarray(tensors[f"layer{index}/weight"], dtype=numpy.float64)
        if weight.ndim != 2 or not all(row.tobytes() in rows for row in weight):
            return _refusal("weight", layer)
        bias = tensors.get(f"layer{index}/bias")
        if bias is not None and not _sent_or_constant(numpy.asarray(bias, dtype=numpy.float64), vectors):
            return _refusal("bias", layer)
    return None


def _rows(drawn: numpy.ndarray) -> set[bytes]:
    """Every row a projection can read from a sent parameter: of the matrix (``nn.Linear``'s
    (out, in)), of its transpose (GPT-2's (in, out), a ``x @ W`` weight), of a kernel-1 conv."""
    if drawn.ndim < 2:
        return set()
    matrices = [drawn.reshape(drawn.shape[0], -1), drawn.reshape(-1, drawn.shape[-1])]
    return {row.tobytes() for matrix in matrices for layout in (matrix, matrix.T) for row in layout}


def _sent_or_constant(bias: numpy.ndarray, vectors: list[bytes]) -> bool:
    """A run of a sent parameter (a packed ``in_proj_bias``'s third), or one value throughout."""
    if bias.ndim != 1:
        return False
    if bias.size == 0 or bool((bias == bias[0]).all()):
        return True
    wanted = bias.tobytes()
    return any(_aligned_find(vector, wanted) for vector in vectors)


def _aligned_find(haystack: bytes, needle: bytes) -> bool:
    start = haystack.find(needle)
    while start != -1:
        if start % 8 == 0:
            return True
        start = haystack.find(needle, start + 1)
    return False


def _refusal(part: str, layer: Mapping[str, Any]) -> str:
    name = str(layer.get("name", "?"))[:60]
    return (
        f"the {part} it reports for {name!r} is not the one it was given: a forward that changes its "
        "weights, code that alters what the checker records, or a weight computed from other parameters "
        "(weight_norm) cannot be judged"
    )
