"""ATT404 rope-on-value: the rotary embedding is applied to V.

RoPE encodes position in the q·k scores only. Rotating V as well makes each
value depend on its absolute position, so the output changes when every
position is shifted by the same amount.

Three spellings are recognised: the formula ``v * cos + rotate_half(v) * sin``;
a rotary helper (``apply_rotary_pos_emb``, ``self.rope``..., or a helper of the
file of any name whose body rotates the parameter) called with a value tensor
whose result is bound back to a value name; and such a helper mapped over a
tuple holding V (``map(lambda t: rope(t), (q, k, v))``, a generator or a list
comprehension) with V bound to the result, the helper judged on the parameter the mapped
tensor is passed as (``map(lambda t: apply_rotary_pos_emb(freqs, t), (q, k, v))``). V is a
tensor named so (``v``, ``value_states``) or one the function uses as V: SDPA's value, or the
right side of the product with a softmax. HF's
``cos, sin = self.rotary_emb(value_states, position_ids)``, which passes V only
for its dtype and device, is not a rotation of V.
"""

from __future__ import annotations

import re

import libcst as cst

from attncheck.static.analysis import rope as rp
from attncheck.static.analysis import semantics, syntax
from attncheck.static.analysis.patterns import tracer
from attncheck.static.context import FileContext
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
        # the rotation mapped over q and k only, and a shape-only lambda over all three
        "def forward(self, q, k, v, cos, sin):\n    q, k, v = map(lambda t: t.transpose(1, 2), (q, k, v))\n"
        "    q, k = map(lambda t: apply_rotary_emb(t, cos, sin), (q, k))\n    return q, k, v\n",
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
        # V known by its role (SDPA's value), rotated in a tuple of calls
        Invalid("def forward(self, q, k, val):\n"
                "    q, k, val = self.rotary(q), self.rotary(k), self.rotary(val)\n"
                "    return F.scaled_dot_product_attention(q, k, val)\n", line=2),
        Invalid("def forward(self, xq, xk, xv, freqs_cis):\n"
                "    xq, xk, xv = apply_rotary_emb(xq, xk, xv, freqs_cis=freqs_cis)\n    return xq, xk, xv\n",
                line=2),
        Invalid("def forward(self, q, k, v, cos, sin):\n"
                "    q, k, v = map(lambda t: apply_rotary_emb(t, cos, sin), (q, k, v))\n    return q, k, v\n",
                line=2, message="mapped"),
        Invalid(_HELPERS.replace("apply_rotary_pos_emb(q, k, cos, sin)", "with_positions(q, cos, sin)")
                .replace(", k * cos + rotate_half(k) * sin", "")
                + "\ndef attend(q, k, v, cos, sin):\n    q, k, v = [with_positions(t, cos, sin) for t in (q, k, v)]\n"
                "    return q, k, v\n", line=12, message="with_positions"),
        # the file's helper takes the frequencies first and the tensor second
        Invalid(_HELPERS + "\ndef with_freqs(freqs, t):\n    return t * freqs.cos() + rotate_half(t) * freqs.sin()\n"
                "\ndef attend(q, k, v, freqs):\n"
                "    q, k, v = map(lambda t: with_freqs(freqs, t), (q, k, v))\n    return q, k, v\n",
                line=15, message="mapped"),
        Invalid(_HELPERS + "\ndef rope_qkv(q, k, v, cos, sin):\n"
                "    q, k = apply_rotary_pos_emb(q, k, cos, sin)\n"
                "    v = v * cos + rotate_half(v) * sin\n    return q, k, v\n", line=13),
    )

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self._roles: dict[int, frozenset[str]] = {}  # by function node: see _value_roles

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

    def visit_Assign(self, node: cst.Assign) -> None:
        """``q, k, v = map(lambda t: rope(t, cos, sin), (q, k, v))`` or ``(rope(t) for t in (q, k, v))``:
        one rotary call mapped over a tuple that holds V, and V bound to the result."""
        mapped = _mapped(node.value)
        if mapped is None or not _bound_to_value(node):
            return
        applied, items, argument = mapped
        name = rp.last_name(applied) or ""
        helper = self.context.shared(_functions_by_name).get(name)
        rotates = _ROTARY.search(name) if helper is None else _rotates_mapped(self.context, helper, argument)
        value = next((item for item in items if _VALUE.match(rp.last_name(item) or "")), None)
        if rotates and value is not None:
            shown = rp.code(self.context.facts, value)
            self.report(
                node.value,
                f"{name} is mapped over a tuple that holds the value tensor {shown}: RoPE belongs on "
                "q and k only, so the output now depends on absolute positions",
                hint=f"rotate q and k, and pass {shown} through unchanged",
            )

    def _check_call(self, index: rp.RopeIndex, call: cst.Call, fn: FunctionFacts | None) -> None:
        name = rp.last_name(call.func) or ""
        helper = self.context.shared(_functions_by_name).get(name)
        if not _ROTARY.search(name) and helper is None:
            return  # a helper of the file is judged by its body, whatever its name (``pos(v, cos, sin)``)
        values = [(i, a) for i, a in enumerate(call.args) if _is_value(a.value)]
        roles: frozenset[str] = frozenset()
        if not values:  # V by the role the function gives it (SDPA's value), whatever its name
            roles = self._value_roles(index, fn)
            values = [(i, a) for i, a in enumerate(call.args) if type(a.value) is cst.Name and a.value.value in roles]
        if not values or not _bound_to_value(_statement_of(index, call), roles):
            return
        position, argument = values[0]
        if helper is not None and not _rotates_parameter(index, helper, position, argument):
            return
        shown = rp.code(self.context.facts, argument.value)
        self.report(
            call,
            f"{name}(...) rotates the value tensor {shown}: RoPE belongs on q and k only, "
            "so the output now depends on absolute positions",
            hint=f"rotate q and k, and pass {shown} through unchanged",
        )


    def _value_roles(self, index: rp.RopeIndex, fn: FunctionFacts | None) -> frozenset[str]:
        """The names ``fn`` uses as V, whatever they are called: the value given to SDPA
        (``scaled_dot_product_attention(q, k, val)``) and the right side of the product with the
        probabilities (``attn @ vals`` where ``attn`` is a softmax, dropped out or not)."""
        if fn is None:
            return frozenset()
        known = self._roles.get(id(fn.node))
        if known is None:
            known = self._roles[id(fn.node)] = self._find_value_roles(index, fn)
        return known

    def _find_value_roles(self, index: rp.RopeIndex, fn: FunctionFacts) -> frozenset[str]:
        sem = semantics.of(self.context)
        follow = tracer(self.context)
        found = set()
        for node in index.nodes_in(fn):
            value = None
            if type(node) is cst.Call and syntax.is_sdpa_call(self.context, node):
                positional = syntax.positional(node)
                value = positional[2] if len(positional) > 2 else syntax.keyword(node, "value")
            elif type(node) is cst.BinaryOperation and type(node.operator) is cst.MatrixMultiply:
                weights, _ = follow.origin(node.left, fn)
                value = node.right if type(weights) is cst.Call and sem.softmax(weights, fn) is not None else None
            if type(value) is cst.Name:
                found.add(value.value)
        return frozenset(found)


def _is_value(node: cst.BaseExpression, roles: frozenset[str] = frozenset()) -> bool:
    """V by name (``v``, ``value_states``) or by the role the function gives it."""
    name = rp.last_name(node) or ""
    return bool(_VALUE.match(name)) or (type(node) is cst.Name and name in roles)


def _statement_of(index: rp.RopeIndex, call: cst.Call) -> cst.CSTNode | None:
    """The assignment ``call`` is the value of, or an element of the tuple that is
    (``q, k, val = self.rotary(q), self.rotary(k), self.rotary(val)``)."""
    parent = index.parent(call)
    if type(parent) is cst.Element:
        holder = index.parent(parent)
        return index.parent(holder) if type(holder) is cst.Tuple else None
    return parent


def _bound_to_value(parent: cst.CSTNode | None, roles: frozenset[str] = frozenset()) -> bool:
    """``v = rope(v)`` or ``q, k, v = apply(q, k, v, ...)``: the result replaces V."""
    if not isinstance(parent, cst.Assign):
        return False
    for target in parent.targets:
        node = target.target
        names = [e.value for e in node.elements] if isinstance(node, (cst.Tuple, cst.List)) else [node]
        if any(_is_value(n, roles) for n in names):
            return True
    return False


# Where the mapped tensor goes in the callee's arguments: (position, the argument), or None for the first.
_Passed = tuple[int, cst.Arg] | None


def _mapped(value: cst.BaseExpression) -> tuple[cst.BaseExpression, list[cst.BaseExpression], _Passed] | None:
    """(the callee, the tensors, where each tensor is passed) of ``map(f, (a, b))``,
    ``map(lambda t: f(freqs, t), (a, b))`` or ``(f(t, ...) for t in (a, b))`` (a list
    comprehension too); None for anything else."""
    if type(value) is cst.Call and type(value.func) is cst.Name and value.func.value == "map" and len(value.args) == 2:
        applied, items = value.args[0].value, value.args[1].value
        passed: _Passed = None
        if type(applied) is cst.Lambda:
            variables = [p.name.value for p in applied.params.params]
            body = applied.body
            applied = body.func if type(body) is cst.Call else None
            passed = _passed_as(body, variables[0]) if type(body) is cst.Call and variables else None
    elif type(value) in (cst.GeneratorExp, cst.ListComp) and type(value.elt) is cst.Call:
        applied, items = value.elt.func, value.for_in.iter
        target = value.for_in.target
        passed = _passed_as(value.elt, target.value) if type(target) is cst.Name else None
    else:
        return None
    if applied is None or type(items) not in (cst.Tuple, cst.List):
        return None
    return applied, [element.value for element in items.elements], passed


def _passed_as(call: cst.Call, variable: str) -> _Passed:
    """Where ``call`` passes the loop variable: ``apply_rotary_pos_emb(freqs, t)`` passes ``t`` second."""
    return next(
        ((i, a) for i, a in enumerate(call.args) if type(a.value) is cst.Name and a.value.value == variable), None
    )


def _rotates_mapped(context: FileContext, helper: FunctionFacts, passed: _Passed) -> bool:
    """Whether the file's own helper rotates the parameter the mapped tensor is given as."""
    if passed is None:
        passed = (0, cst.Arg(cst.Name(next((p for p in helper.params if p != "self"), ""))))
    return _rotates_parameter(rp.rope_index(context), helper, *passed)


def _functions_by_name(context: FileContext) -> dict[str, FunctionFacts | None]:
    """Each function name of the file with its function; None for a name defined more than once.
    Built once per file: the rule looks up the callee of every call."""
    found: dict[str, FunctionFacts | None] = {}
    for fn in context.facts.functions:
        found[fn.name] = None if fn.name in found else fn
    return found


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
