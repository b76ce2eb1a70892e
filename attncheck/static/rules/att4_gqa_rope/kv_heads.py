"""Whether K or V reaches SDPA still split into the KV heads, for ATT401.

``F.scaled_dot_product_attention`` pairs query head h with key head h: given fewer KV
heads than query heads it fails (or, with one KV head, broadcasts) unless
``enable_gqa=True`` is passed. A GQA module that splits K/V with ``num_kv_heads`` and hands
them to SDPA with neither that flag nor an expansion in between is the mistake. The trace
is flow-insensitive, as the analyses are: every value a name is ever given in the function
is followed, and any widening among them (``repeat_kv``, ``repeat_interleave``, ``expand``,
``repeat``, ``cat``, a helper named for repeating or expanding) counts as an expansion.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import libcst as cst

from attncheck.static.analysis import rope as rp
from attncheck.static.analysis.flow import reaching
from attncheck.static.facts import FileFacts, FunctionFacts, integer_value, self_attribute

_KV_COUNT = re.compile(r"kv_heads?\b|key_value_heads\b|n_kv\b|num_kv\b|kv_head_count")
_SPLITS = frozenset({"view", "reshape", "unflatten"})
_WIDENING = re.compile(r"repeat|expand|tile|cat|stack|broadcast|gqa", re.IGNORECASE)


def kv_split(
    expr: cst.BaseExpression, fn: FunctionFacts | None, facts: FileFacts, code: Callable[[cst.CSTNode], str]
) -> cst.Call | None:
    """The ``view``/``reshape`` that splits ``expr`` into the KV heads, when no value reaching it
    widens them again; None when it is widened, split some other way, not traced, or split into
    one KV head (multi-query attention, which SDPA broadcasts correctly)."""
    split: cst.Call | None = None
    for node in reaching(expr, fn):
        if type(node) is not cst.Call:
            continue
        name = rp.last_name(node.func) or ""
        if _WIDENING.search(name):
            return None
        if split is None and name in _SPLITS:
            counts = [a.value for a in node.args if _KV_COUNT.search(code(a.value))]
            named = bool(counts) and integer_value(facts.resolve(counts[0], fn)) != 1
            inferred = not counts and _inferred_heads(node) and _projects_to_kv_heads(node, fn, facts, code)
            if named or inferred:
                split = node
    return split


def _inferred_heads(split: cst.Call) -> bool:
    """``view(b, s, -1, head_dim)``: the head count is left for the width to decide."""
    return any(integer_value(a.value) == -1 for a in split.args[:-1])


def _projects_to_kv_heads(
    split: cst.Call, fn: FunctionFacts | None, facts: FileFacts, code: Callable[[cst.CSTNode], str]
) -> bool:
    """The split tensor is ``self.k_proj(x)`` where ``self.k_proj = nn.Linear(d, num_kv_heads * head_dim)``:
    its width, and so the head count ``-1`` stands for, is the KV-head count."""
    owner = fn.owner if fn is not None else None
    receiver = split.func.value if type(split.func) is cst.Attribute else None
    if owner is None or type(receiver) is not cst.Call:
        return False
    attr = self_attribute(receiver.func)
    built = owner.attributes.get(attr, []) if attr is not None else []
    return len(built) == 1 and type(built[0]) is cst.Call and bool(_KV_COUNT.search(code(built[0])))
