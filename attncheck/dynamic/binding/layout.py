"""Which axis of a module's input is the batch: the layout its code states.

Most attention code is batch-first, (batch, seq, dim). fairseq, torch's ``nn.MultiheadAttention``
with ``batch_first=False`` and older research code are sequence-first, (seq, batch, dim): fed
batch-first, their batch axis is the probes' sequence, and the batch-independence probe sees
positions leak into each other (a false ATT904). The code says which it takes, in this order:

- the default of its own ``batch_first`` constructor argument (the layout a user's own call gets);
- the names its forward unpacks the input's shape into (``tgt_len, bsz, embed_dim = query.size()``);
- the shapes its docstrings give (``query: (L, N, E)``, "Time x Batch x Channel");
- the ``batch_first`` of an ``nn.MultiheadAttention`` it builds (torch's default is False), unless its
  forward swaps the first two axes itself.

A core on per-head q, k, v is sequence-first when its forward turns (seq, batch, heads, head_dim)
inputs into (batch, heads, seq, head_dim) itself (ChatGLM's ``CoreAttention``: ``permute(1, 2, 0, 3)``).

The child feeds a sequence-first module (seq, batch, dim) or (seq, batch, heads, head_dim) and turns its
output back (``executor``), so the parent plans, references and judges batch-first as for every other module.
"""

from __future__ import annotations

import re

from attncheck.dynamic.binding.source_facts import CodeFacts

_SEQ = frozenset({
    "l", "s", "t", "seq", "seqlen", "seq_len", "seq_length", "sequence", "sequence_length", "tgt_len", "src_len",
    "tgt", "src", "time", "timesteps", "len", "length", "tokens", "n_tokens", "num_tokens", "q_len", "k_len",
    "kv_len", "target_len", "source_len", "tgt_length", "src_length",
})
_BATCH = frozenset({"n", "b", "bs", "bsz", "batch", "batch_size", "nbatch", "n_batch", "nbatches", "batch_sz"})
_SHAPES = (
    re.compile(r"[(\[]\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*[)\]]"),  # (L, N, E), [tgt_len, bsz, embed_dim]
    re.compile(r"\b(\w+)\s+x\s+(\w+)\s+x\s+(\w+)\b", re.IGNORECASE),  # fairseq's "Time x Batch x Channel"
)


def sequence_first(code: CodeFacts, docs: str, first: str) -> str:
    """Why the module's input ``first`` is (seq, batch, dim), or '' when it is batch-first."""
    if code.batch_first is not None:
        return "" if code.batch_first else "its batch_first argument defaults to False"
    names = code.unpacked.get(first, ())
    order = _order(*names) if len(names) == 3 else ""
    if order:
        return f"forward unpacks {first}'s shape as ({', '.join(names)})" if order == "seq-first" else ""
    orders = {_order(*match) for pattern in _SHAPES for match in pattern.findall(docs)} - {""}
    if orders:
        return "its documentation gives (seq, batch, dim) inputs" if orders == {"seq-first"} else ""
    if code.mha_batch_first is False and not code.transposes_input:
        return "it calls an nn.MultiheadAttention built without batch_first=True"
    return ""


SEQUENCE_FIRST_HEADS = (1, 2, 0, 3)  # (seq, batch, heads, head_dim) -> (batch, heads, seq, head_dim)


def sequence_first_heads(code: CodeFacts, first: str) -> str:
    """Why a per-head core's input ``first`` is (seq, batch, heads, head_dim), or '' when it is not."""
    if code.permuted.get(first) != SEQUENCE_FIRST_HEADS:
        return ""
    return f"forward permutes {first} from (seq, batch, heads, head_dim) to (batch, heads, seq, head_dim)"


def _order(first: str, second: str, third: str) -> str:
    """'seq-first' for (seq, batch, width), 'batch-first' for (batch, seq, width), else ''; a shape whose
    third axis is a sequence too is a mask's (N, L, S), not an input's."""
    first, second, third = first.lower(), second.lower(), third.lower()
    if third in _SEQ:
        return ""
    if first in _SEQ and second in _BATCH:
        return "seq-first"
    return "batch-first" if first in _BATCH and second in _SEQ else ""
