"""ATT404 rope-on-value: the rotary embedding is applied to V.

RoPE encodes position in the q·k scores only. Rotating V as well makes each
value depend on its absolute position, so the output changes when every
position is shifted by the same amount.

Two spellings are recognised: the formula ``v * cos + rotate_half(v) * sin``,
and a rotary helper (``apply_rotary_pos_emb``, ``self.rope``...) called with a
value tensor whose result is bound back to a value name. HF's
``cos, sin = self.rotary_emb(value_states, position_ids)``, which passes V only
for its dtype and device, is not a rotation of V.
"""

from __future__ import annotations

import re

import libcst as cst

from attncheck.static.analysis import rope as rp
from attncheck.static.facts import FunctionFacts
from attncheck.static.rule import Invalid, Rule

_VALUE = re.compile(r"^(v|V|xv|vs|value|values|value_states|value_layer|v_states|v_heads)$")
_ROTARY = re.compile(r"rotary|rope|rotate", re.IGNORECASE)

_HELPERS = """
import torch

def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)

def apply_rotary_pos_emb(q, k, cos, sin):
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
"""


class RopeOnValue(Rule):
    code = "ATT404"
    PREFILTER = ("rotary", "rotate", "rope", "RoPE", "Rope")
    VALID = (
        _HELPERS + "\ndef attend(q, k, v, cos, sin):\n    q, k = apply_rotary_pos_emb(q, k, cos, sin)\n"
        "    return torch.softmax(q @ k.transpose(-2, -1) * q.size(-1) ** -0.5, dim=-1) @ v\n",
        # HF passes value_states to the rotary module only for its dtype and device.
        "def forward(self, query_states, key_states, value_states, position_ids):\n"
        "    cos, sin = self.rotary_emb(value_states, position_ids)\n"
        "    return apply_rotary_pos_emb(query_states, key_states, cos, sin)\n",
        # Meta's complex form on xq and xk only.
        "def forward(self, xq, xk, xv, freqs_cis):\n"
        "    xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)\n    return xq, xk, xv\n",
        # a helper that takes v but rotates only q and k.
        _HELPERS + "\ndef rope_qkv(q, k, v, cos, sin):\n    q, k = apply_rotary_pos_emb(q, k, cos, sin)\n"
        "    return q, k, v\n\ndef attend(q, k, v, cos, sin):\n    q, k, v = rope_qkv(q, k, v, cos, sin)\n"
        "    return q, k, v\n",
    )
    INVALID = (
        Invalid(_HELPERS + "\ndef attend(q, k, v, cos, sin):\n"
                "    q, k = apply_rotary_pos_emb(q, k, cos, sin)\n"
                "    v = v * cos + rotate_half(v) * sin\n    return q, k, v\n", line=13, message="v"),
        Invalid("def forward(self, q, k, v):\n"
                "    q, k, v = apply_rotary_pos_emb(q, k, v, self.cos, self.sin)\n"
                "    return q, k, v\n", line=2, message="apply_rotary_pos_emb"),
        Invalid("def forward(self, q, k, v):\n"
                "    q = self.rope(q)\n    k = self.rope(k)\n    v = self.rope(v)\n"
                "    return q, k, v\n", line=4),
        Invalid("def forward(self, xq, xk, xv, freqs_cis):\n"
                "    xq, xk, xv = apply_rotary_emb(xq, xk, xv, freqs_cis=freqs_cis)\n    return xq, xk, xv\n",
                line=2),
        Invalid(_HELPERS + "\ndef rope_qkv(q, k, v, cos, sin):\n"
                "    q, k = apply_rotary_pos_emb(q, k, cos, sin)\n"
                "    v = v * cos + rotate_half(v) * sin\n    return q, k, v\n", line=13),
    )

    def visit_Module(self, node: cst.Module) -> None:
        index = rp.rope_index(self.context)
        for application in index.applications:
            shown = rp.code(self.context.facts, application.tensor)
            if _VALUE.match(rp.last_name(application.tensor) or ""):
                self.report(
                    application.node,
                    f"the rotary embedding is applied to the value tensor {shown}: RoPE belongs on "
                    "q and k only, so the output now depends on absolute positions",
                    hint=f"leave {shown} unrotated",
                )
        for fn, call in index.calls:
            self._check_call(index, call, fn)

    def _check_call(self, index: rp.RopeIndex, call: cst.Call, fn: FunctionFacts | None) -> None:
        name = rp.last_name(call.func) or ""
        if not _ROTARY.search(name):
            return
        values = [(i, a) for i, a in enumerate(call.args) if _VALUE.match(rp.last_name(a.value) or "")]
        if not values or not _bound_to_value(index.parent(call)):
            return
        position, argument = values[0]
        helper = _defined(self.context.facts.functions, name)
        if helper is not None and not _rotates_parameter(index, helper, position, argument):
            return
        shown = rp.code(self.context.facts, argument.value)
        self.report(
            call,
            f"{name}(...) rotates the value tensor {shown}: RoPE belongs on q and k only, "
            "so the output now depends on absolute positions",
            hint=f"rotate q and k, and pass {shown} through unchanged",
        )


def _bound_to_value(parent: cst.CSTNode | None) -> bool:
    """``v = rope(v)`` or ``q, k, v = apply(q, k, v, ...)``: the result replaces V."""
    if not isinstance(parent, cst.Assign):
        return False
    for target in parent.targets:
        node = target.target
        names = [e.value for e in node.elements] if isinstance(node, (cst.Tuple, cst.List)) else [node]
        if any(_VALUE.match(rp.last_name(n) or "") for n in names):
            return True
    return False


def _defined(functions: list[FunctionFacts], name: str) -> FunctionFacts | None:
    found = [fn for fn in functions if fn.name == name]
    return found[0] if len(found) == 1 else None


def _rotates_parameter(index: rp.RopeIndex, helper: FunctionFacts, position: int, argument: cst.Arg) -> bool:
    """Whether the file's own helper really rotates the parameter V is passed to."""
    params = [p for p in helper.params if p != "self"]
    if argument.keyword is not None:
        param = argument.keyword.value
    elif position < len(params):
        param = params[position]
    else:
        return True
    for node in index.nodes_in(helper):
        if isinstance(node, cst.BinaryOperation):
            applied = next((a for a in index.applications if a.node is node), None)
            if applied is not None and rp.last_name(applied.tensor) == param:
                return True
        if (
            isinstance(node, cst.Call)
            and _ROTARY.search(rp.last_name(node.func) or "")
            and any(rp.last_name(a.value) == param for a in node.args)
        ):
            return True
    return False
