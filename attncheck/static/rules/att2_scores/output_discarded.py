"""ATT206 output-discarded: a block computes the attention output and returns something else."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from attncheck.static.analysis import semantics, syntax
from attncheck.static.analysis.blocks import bound, reads, straight_blocks
from attncheck.static.analysis.patterns import product_operands, tracer
from attncheck.static.context import FileContext
from attncheck.static.facts import FunctionFacts, dotted_name, self_attribute
from attncheck.static.rule import Invalid, Rule

_CLASS = """
import math, torch, torch.nn as nn, torch.nn.functional as F
class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, c // self.h).permute(2, 0, 3, 1, 4)
        {body}
"""

# Methods whose call stores what they are given into their receiver (``outputs.append(y)``).
_STORING = frozenset({"append", "extend", "insert", "update", "add", "copy_", "put"})


def _cls(body: str) -> str:
    return _CLASS.replace("{body}", body)


class OutputDiscarded(Rule):
    code = "ATT206"
    PREFILTER = ("softmax", "scaled_dot_product")
    VALID = (
        _cls("y = F.scaled_dot_product_attention(q, k, v)\n        y = y.transpose(1, 2).reshape(b, t, c)\n"
             "        return self.proj(y)"),
        _cls("w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(c // self.h), dim=-1)\n"
             "        outs = []\n        outs.append(w @ v)\n"
             "        return self.proj(torch.cat(outs, 1).reshape(b, t, c))"),
        # Attention maps for inspection: the weights are what is asked for.
        _cls("w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(c // self.h), dim=-1)\n        return w"),
    )
    INVALID = (
        Invalid(
            _cls("y = F.scaled_dot_product_attention(q, k, v)\n"
                 "        return self.proj(v.transpose(1, 2).reshape(b, t, c))"),
            line=12,
            message="returns",
        ),
        Invalid(
            _cls("w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(c // self.h), dim=-1)\n"
                 "        out = (w @ v).transpose(1, 2).reshape(b, t, c)\n        return self.proj(x)"),
            line=13,
        ),
    )

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self._helpers: dict[int, bool] = {}  # by method id: whether it returns an attention output

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        fn = self.context.facts.function(node)
        sem = semantics.of(self.context)
        if fn is None or not (
            any(sem.softmax(call, fn) is not None or syntax.is_sdpa_call(self.context, call) for call in fn.calls)
            or self._calls_attending_helper(fn)
        ):
            return  # no attention computed here, nor by a helper method it calls
        for statements in straight_blocks(node.body):
            for position, statement in enumerate(statements):
                name, value = bound(statement)
                if name in (None, "_") or value is None or not self._attention_output(value, fn):
                    continue
                returned = _returned_without(statements[position + 1 :], name)
                if returned is not None:
                    shown = sem.code
                    self.report(
                        value,
                        f"the attention output `{name}` is computed here, but the block returns "
                        f"`{shown(returned)}`, which never reads it: the attention is thrown away",
                        hint=f"return what is computed from `{name}` (its heads merged and projected)",
                        evidence=[f"return {shown(returned)}"],
                    )
                    break

    def _attention_output(self, value: cst.BaseExpression, fn: FunctionFacts) -> bool:
        """SDPA's result, or a product whose weights come from a softmax (through names and
        dropout): ``attn @ v``, ``torch.matmul(probs, value)``, reshaped or not
        (``(attn @ v).transpose(1, 2).reshape(b, t, c)``)."""
        for _ in range(6):
            if type(value) is cst.Call and (
                syntax.is_sdpa_call(self.context, value) or self._attending_helper(value, fn) is not None
            ):
                return True
            operands = product_operands(value, self.context.facts)
            if operands:
                return self._weights(operands[0], fn)
            if type(value) is not cst.Call or type(value.func) is not cst.Attribute:
                return False
            if dotted_name(value.func.value) == "self":
                return False  # a module's call, not a reshape of a product
            value = value.func.value
        return False

    def _calls_attending_helper(self, fn: FunctionFacts) -> bool:
        """Whether ``fn`` calls a method of its class that returns an attention output (the
        calls of other callees are passed over with one test each)."""
        methods = fn.owner.methods if fn.owner is not None else {}
        return any(
            self._attending_helper(call, fn) is not None for call in fn.calls if self_attribute(call.func) in methods
        )

    def _attending_helper(self, call: cst.Call, fn: FunctionFacts) -> FunctionFacts | None:
        """The method of ``fn``'s class that ``self.helper(...)`` calls, when it returns an
        attention output (first of a tuple: ``return attn_output, attn_weights``); the output is
        then computed by the call, and thrown away with it."""
        owner = fn.owner
        attr = self_attribute(call.func)
        helper = owner.methods.get(attr) if owner is not None and attr is not None else None
        if helper is None or helper is fn:
            return None
        known = self._helpers.get(id(helper))
        if known is None:
            self._helpers[id(helper)] = False  # a helper calling itself back ends here
            returned = [_first(ret.value) for ret in semantics.of(self.context).index.returns.get(id(helper), [])
                        if ret.value is not None]
            known = self._helpers[id(helper)] = any(self._returns_output(value, helper) for value in returned)
        return helper if known else None

    def _returns_output(self, value: cst.BaseExpression, helper: FunctionFacts) -> bool:
        """Whether a helper's returned value is an attention output, as written or as the name it
        returns was computed (``out = attn @ v; return out.transpose(1, 2)``)."""
        if self._attention_output(value, helper):
            return True
        while type(value) is cst.Call and type(value.func) is cst.Attribute and dotted_name(value.func.value) != "self":
            value = value.func.value  # the reshapes of the name returned
        if type(value) is not cst.Name:
            return False
        source, where = tracer(self.context).origin(value, helper)
        return source is not value and where is not None and self._attention_output(source, where)

    def _weights(self, operand: cst.BaseExpression, fn: FunctionFacts) -> bool:
        """Whether the left operand of a product holds softmax weights."""
        sem = semantics.of(self.context)
        source, where = tracer(self.context).origin(operand, fn)
        return type(source) is cst.Call and sem.softmax(source, where) is not None


def _first(value: cst.BaseExpression) -> cst.BaseExpression:
    """The first element of a returned tuple (``attn_output, attn_weights``), else the value."""
    return value.elements[0].value if type(value) is cst.Tuple and value.elements else value


def _returned_without(following: Sequence[cst.BaseStatement], name: str) -> cst.BaseExpression | None:
    """The value of the block's ``return`` when neither it nor anything it could read was
    computed from ``name``: the names computed from it are followed through assignments and
    through ``outputs.append(name)``. None when the block ends without a return, returns
    nothing, or a statement that reads ``name`` is more than an assignment or a store."""
    derived = {name}
    for statement in following:
        if type(statement) is not cst.SimpleStatementLine:
            if reads(statement, *derived):
                return None  # read in a nested block: its fate is not straight-line
            continue
        for small in statement.body:
            if type(small) is cst.Return:
                value = small.value
                if value is None or (type(value) is cst.Name and value.value == "None"):
                    return None
                return None if reads(value, *derived) else value
            if not reads(small, *derived):
                continue
            written = _written(small)
            if written is None:
                return None
            derived |= written
    return None


def _written(small: cst.BaseSmallStatement) -> set[str] | None:
    """The names a statement that reads the output writes: its targets, or the receiver of a
    store (``outs.append(y)``, ``self.cache.update(y)``); None for anything else."""
    if type(small) in (cst.Assign, cst.AnnAssign, cst.AugAssign):
        targets = [t.target for t in small.targets] if type(small) is cst.Assign else [small.target]
        return {n.value for t in targets for n in _names(t)}
    if type(small) is cst.Expr and type(small.value) is cst.Call and type(small.value.func) is cst.Attribute:
        call = small.value.func
        if call.attr.value in _STORING:
            receiver = dotted_name(call.value)
            return {receiver.split(".")[0]} if receiver else None
    return None


def _names(target: cst.BaseExpression) -> list[cst.Name]:
    """The names a target binds; an attribute (``self.out = y``) by its last name, which is how
    ``reads`` sees ``return self.out``."""
    if type(target) is cst.Name:
        return [target]
    if type(target) is cst.Attribute:
        return [target.attr]
    if type(target) in (cst.Tuple, cst.List):
        return [n for e in target.elements for n in _names(e.value)]
    return []
