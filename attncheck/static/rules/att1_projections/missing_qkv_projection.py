"""ATT101 missing-qkv-projection: heads are split from raw inputs, not from learned projections."""

from __future__ import annotations

import re

import libcst as cst

from attncheck.findings import Severity
from attncheck.static.analysis import semantics
from attncheck.static.analysis.blocks import bound, rebinding, straight_blocks
from attncheck.static.analysis.syntax import projection_role
from attncheck.static.facts import ClassFacts, FunctionFacts, self_attribute
from attncheck.static.rule import Invalid, Rule
from attncheck.static.tree import subtree

_HINT = (
    "project before splitting: q = self.q_proj(query).view(b, s, h, dh).transpose(1, 2), and likewise k, v"
)
_QKV_ROLES = frozenset({"q", "k", "v", "qkv", "kv"})
_SHAPE_ATTRIBUTES = frozenset({"shape", "size", "dtype", "device", "ndim", "dim"})
# The projection an input of this name is meant for (any other data input: the query).
_ROLE_OF_INPUT = {"key": "k", "keys": "k", "value": "v", "values": "v", "query": "q", "queries": "q"}
# Inputs that are reshaped for bookkeeping, not attended over.
_NOT_DATA = re.compile(r"mask|pos|bias|cache|past|rotary|cos|sin|freq|ids|len", re.I)

_CLASS = """
import math, torch, torch.nn as nn, torch.nn.functional as F
class Attention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.h, self.dh = num_heads, d_model // num_heads
        {init}
    def forward(self, x):
        b, s, d = x.shape
        {body}
        out = F.scaled_dot_product_attention(q, k, v)
        return self.out_proj(out.transpose(1, 2).reshape(b, s, d))
"""


def _cls(init: str, body: str) -> str:
    init = init + "\n        self.out_proj = nn.Linear(d_model, d_model)"
    return _CLASS.replace("{init}", init).replace("{body}", body)


_SEPARATE = (
    "self.q = nn.Linear(d_model, d_model)\n        self.k = nn.Linear(d_model, d_model)\n"
    "        self.v = nn.Linear(d_model, d_model)"
)
_SPLIT = "{} = {}.view(b, s, self.h, self.dh).transpose(1, 2)"


class MissingQkvProjection(Rule):
    code = "ATT101"
    PREFILTER = ("view", "reshape", "rearrange", "unflatten")
    VALID = (
        # Reformer: a flag only tested (output_attentions is False) is no input left unprojected.
        "import torch, torch.nn as nn\nclass A(nn.Module):\n    def __init__(self, d):\n"
        "        super().__init__()\n        self.query, self.value = nn.Linear(d, d), nn.Linear(d, d)\n"
        "    def forward(self, hidden_states, output_attentions=False):\n"
        "        q, v = self.query(hidden_states), self.value(hidden_states)\n"
        "        w = torch.softmax(q @ q.transpose(-2, -1) / q.size(-1) ** 0.5, dim=-1)\n"
        "        out = (w @ v).view(hidden_states.shape)\n"
        "        return (out, w) if output_attentions is not False else (out,)",
        _cls(_SEPARATE, "\n        ".join(_SPLIT.format(n, f"self.{n}(x)") for n in "qkv")),
        _cls(
            "self.qkv = nn.Linear(d_model, 3 * d_model)",
            "q, k, v = self.qkv(x).reshape(b, s, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)",
        ),
        _cls(
            "self.in_proj_weight = nn.Parameter(torch.empty(3 * d_model, d_model))",
            "q, k, v = F.linear(x, self.in_proj_weight).chunk(3, dim=-1)\n        "
            + "\n        ".join(_SPLIT.format(n, n) for n in "qkv"),
        ),
        _cls(
            "self.c_attn = nn.Conv1d(d_model, 3 * d_model, 1)",
            "qkv = self.c_attn(x.transpose(1, 2)).transpose(1, 2)\n        "
            "q, k, v = qkv.reshape(b, s, 3, self.h, self.dh).unbind(2)\n        "
            "q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)",
        ),
        # Cross-attention: the context defaults to the input, and each is projected.
        "import torch, torch.nn as nn\nclass Cross(nn.Module):\n"
        "    def __init__(self, d):\n        super().__init__()\n"
        "        self.to_q, self.to_kv = nn.Linear(d, d), nn.Linear(d, 2 * d)\n"
        "    def forward(self, x, context=None):\n        context = x if context is None else context\n"
        "        q = self.to_q(x)\n        k, v = self.to_kv(context).chunk(2, dim=-1)\n"
        "        return torch.softmax(q @ k.transpose(-2, -1) / x.size(-1) ** 0.5, dim=-1) @ v",
        "import torch\ndef attention(q, k, v, h):\n    b, s, d = q.shape\n"
        "    q = q.view(b, s, h, d // h).transpose(1, 2)\n    return q",
    )
    INVALID = (
        Invalid(  # the query projected from the keys' input; x read only for its shape
            "import torch, torch.nn as nn\nclass Cross(nn.Module):\n"
            "    def __init__(self, d):\n        super().__init__()\n"
            "        self.to_q, self.to_kv = nn.Linear(d, d), nn.Linear(d, 2 * d)\n"
            "    def forward(self, x, context):\n        b, n, d = x.shape\n"
            "        q = self.to_q(context)\n        k, v = self.to_kv(context).chunk(2, dim=-1)\n"
            "        return (torch.softmax(q @ k.transpose(-2, -1) / d ** 0.5, dim=-1) @ v).view(b, n, d)",
            line=8,
            message="never projected",
        ),
        Invalid(  # the projected value overwritten by the raw input
            "import torch, torch.nn as nn\nclass A(nn.Module):\n"
            "    def __init__(self, d):\n        super().__init__()\n"
            "        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)\n"
            "    def forward(self, x):\n        q, k = self.q(x), self.k(x)\n        v = self.v(x)\n        v = x\n"
            "        return (torch.softmax(q @ k.transpose(-2, -1) / x.size(-1) ** 0.5, dim=-1) @ v).view(x.shape)",
            line=9,
            message="overwritten",
        ),
        Invalid(
            _cls(_SEPARATE, "\n        ".join(_SPLIT.format(n, "x") for n in "qkv")),
            line=13,
            message="self.q",
        ),
        Invalid(
            _cls(
                _SEPARATE,
                "q = self.q(x)\n        q = x.reshape(b, s, self.h, self.dh).transpose(1, 2)\n"
                "        k = v = q",
            ),
            line=14,
        ),
        Invalid(
            _cls(
                "",
                "from einops import rearrange\n        "
                "q = k = v = rearrange(x, 'b s (h d) -> b h s d', h=self.h)",
            ),
            line=12,
            severity=Severity.WARNING,
        ),
        Invalid(  # the raw split reaches q·kᵀ and the softmax: q and k are the input itself
            "import torch, torch.nn as nn\nclass Attention(nn.Module):\n"
            "    def __init__(self, d, h):\n        super().__init__()\n        self.h, self.q = h, nn.Linear(d, d)\n"
            "    def forward(self, x):\n        b, s, d = x.shape\n"
            "        q = x.view(b, s, self.h, d // self.h).transpose(1, 2)\n"
            "        w = torch.softmax(q @ q.transpose(-2, -1) / (d // self.h) ** 0.5, dim=-1)\n"
            "        return (w @ q).transpose(1, 2).reshape(b, s, d)",
            line=8,
            message="self.q",
        ),
    )

    def _report_other_input(self, forward: FunctionFacts) -> bool:
        """A data input of forward read only for its shape while the Q/K/V projections all read
        another one: ``q = self.to_q(context)`` in a forward of ``(x, context)``, ``self.q_proj(key)``
        in one of ``(query, key, value)``. The query (or value) is re-derived from the wrong input."""
        params = [p for p in _positional_params(forward) if not _NOT_DATA.search(p)]
        calls = [c for c in forward.calls if _projection_attr(c) is not None and c.args] if len(params) > 1 else []
        if not calls:
            return False
        read = {n.value for c in calls for a in c.args for n in subtree.preorder(a.value) if type(n) is cst.Name}
        unread = [p for p in params if p not in read]
        if not unread or not read & set(params):
            return False
        shape_only = _shape_only(forward, unread)
        for param in unread:
            if param not in shape_only:
                continue
            role = _ROLE_OF_INPUT.get(param, "q")
            call = next((c for c in calls if projection_role(_projection_attr(c) or "") == role), calls[0])
            shown = semantics.of(self.context).code(call)
            self.report(
                call,
                f"`{param}` is never projected (forward reads only its shape): `{shown}` derives the "
                f"{role} from another input",
                hint=f"project {param}: {role} = self.{_projection_attr(call)}({param})",
                evidence=[f"{param}: read only for its shape", f"projected: {', '.join(sorted(read & set(params)))}"],
            )
            return True
        return False

    def _report_discarded(self, discarded: list[tuple[cst.Call, cst.BaseExpression]]) -> None:
        for call, rebound in discarded[:1]:
            shown = semantics.of(self.context).code
            self.report(
                rebound,
                f"`{shown(call)}` is computed and then overwritten by `{shown(rebound)}` before it is "
                "read: the learned projection is thrown away",
                hint="split the projected states: v = self.v_proj(x).view(b, s, h, dh).transpose(1, 2)",
            )

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        klass = self.context.klass
        forward = klass.methods.get("forward") if klass is not None else None
        if klass is None or forward is None:
            return
        sem = semantics.of(self.context)
        raw_splits = []
        for call, tensor in sem.splits(forward):
            # A split of projected states (most are) is settled without the walk of forward's
            # q, k and v lineage that ``feeds_attention`` builds.
            projected, raw = sem.provenance(tensor, forward)
            data = [name for name in raw if not _NOT_DATA.search(name)]
            if projected or not data:
                continue
            if sem.feeds_attention(call, forward):  # not a patchify, a feature reshape, states projected later
                raw_splits.append((call, data))
        discarded = _discarded_projections(forward)
        if not raw_splits:
            self._report_other_input(forward) or self._report_discarded(discarded)
            return
        inputs = sorted({name for _, names in raw_splits for name in names})
        unused = _unused_projections(sem, klass)
        message = (
            f"{', '.join(inputs)} {'is' if len(inputs) == 1 else 'are'} split into heads without a learned "
            "Q/K/V projection"
        )
        if unused:
            shown = ", ".join(f"self.{a}" for a in unused)
            message += f"; {shown} {'is' if len(unused) == 1 else 'are'} defined but forward never calls them"
        if discarded:
            shown = ", ".join(sem.code(call) for call, _ in discarded)
            message += f"; {shown} is computed and overwritten before it is read"
        self.report(
            raw_splits[0][0],
            message,
            hint=_HINT,
            severity=None if unused or discarded else Severity.WARNING,
            evidence=[sem.code(call) for call, _ in raw_splits],
        )


def _discarded_projections(forward: FunctionFacts) -> list[tuple[cst.Call, cst.BaseExpression]]:
    """``(projection call, what overwrites it)`` for each ``v = self.v_proj(x)`` whose name is bound
    again before it is read (``v = x.view(...)``): the projection is computed and thrown away."""
    if not any(_projection_attr(call) is not None for call in forward.calls):
        return []  # most functions: no projection to throw away, and no value need be walked
    rebound = {name for name, values in forward.assignments.items() if len(values) > 1}  # the rest stay
    found = []
    for statements in straight_blocks(forward.node.body) if rebound else ():
        for position, statement in enumerate(statements):
            name, value = bound(statement)
            if name not in rebound or value is None:
                continue
            call = _projection_call(value)
            overwritten = rebinding(statements[position + 1 :], name) if call is not None else None
            if call is not None and overwritten is not None:
                found.append((call, overwritten))
    return found


def _projection_call(value: cst.BaseExpression) -> cst.Call | None:
    """The ``self.q_proj(x)`` call a value is computed from (``self.q_proj(x).view(...)``)."""
    for node in subtree.preorder(value):
        if type(node) is cst.Call and _projection_attr(node) is not None:
            return node
    return None


def _projection_attr(call: cst.Call) -> str | None:
    attr = self_attribute(call.func)
    return attr if attr is not None and projection_role(attr) in _QKV_ROLES else None


def _shape_only(forward: FunctionFacts, params: list[str]) -> set[str]:
    """Those of ``params`` that ``forward`` reads for their size (``x.shape``, ``x.size(1)``) and
    otherwise at most tests against None: tensors that feed no value into the attention. A flag
    or a size only tested (``output_attentions is False``) is no such tensor. One walk of the body."""
    uses = dict.fromkeys(params, 0)
    sizes = dict.fromkeys(params, 0)
    tests = dict.fromkeys(params, 0)
    for node in subtree.preorder(forward.node.body):
        kind = type(node)
        if kind is cst.Name and node.value in uses:
            uses[node.value] += 1
        elif kind is cst.Attribute and type(node.value) is cst.Name and node.value.value in uses:
            sizes[node.value.value] += node.attr.value in _SHAPE_ATTRIBUTES
        elif kind is cst.Comparison and type(node.left) is cst.Name and node.left.value in uses:
            tests[node.left.value] += all(type(c.operator) in (cst.Is, cst.IsNot) for c in node.comparisons)
    found = {p for p in params if sizes[p] > 0 and uses[p] == sizes[p] + tests[p]}
    return found | {p for p in params if uses[p] == 0 and p in _ROLE_OF_INPUT}


def _positional_params(forward: FunctionFacts) -> list[str]:
    """The named parameters of ``forward`` but ``self`` (not ``*args`` or ``**kwargs``)."""
    parameters = forward.node.params
    return [p.name.value for p in (*parameters.posonly_params, *parameters.params) if p.name.value != "self"]


def _unused_projections(sem: semantics.Semantics, klass: ClassFacts) -> list[str]:
    return [
        attr
        for attr in klass.attributes
        if projection_role(attr) in {"q", "k", "v", "qkv", "kv"}
        and "bias" not in attr.lower()  # Transformer-XL's pos_bias_v is added to q, not a projection
        and sem.is_projection_module(klass, attr)
        and sem.module_kind(klass, attr) is not None
        and not sem.references_outside_init(klass, attr)
    ]
