"""ATT102 missing-output-projection: merged heads must go through W_o before they are returned."""

from __future__ import annotations

import re

import libcst as cst

from attncheck.findings import Severity
from attncheck.static.analysis import semantics
from attncheck.static.analysis.syntax import projection_role
from attncheck.static.facts import ClassFacts, FunctionFacts, self_attribute
from attncheck.static.rule import Invalid, Rule

_HINT = "apply the output projection to the merged heads: return self.out_proj(out)"
# The attention half of a BERT-style pair: its sibling (SelfOutput) applies the dense layer.
_CORE_NAME = re.compile(r"(SelfAttention|Core|Inner|Heads?)$")

_CLASS = """
import torch, torch.nn as nn, torch.nn.functional as F
class Attention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.h = num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        {init}
    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v)
        {body}
"""


def _cls(init: str, body: str) -> str:
    return _CLASS.replace("{init}", init).replace("{body}", body)


_PROJ = "self.proj = nn.Linear(d_model, d_model)"


class MissingOutputProjection(Rule):
    code = "ATT102"
    PREFILTER = ("view", "reshape", "rearrange", "flatten", "head")
    VALID = (
        "import torch, torch.nn as nn\nclass MultiHead(nn.Module):\n    def __init__(self, heads, d):\n"
        "        super().__init__()\n        self.heads, self.proj = nn.ModuleList(heads), nn.Linear(d, d)\n"
        "    def forward(self, x):\n        return self.proj(torch.cat([h(x) for h in self.heads], dim=-1))",
        _cls(_PROJ, "return self.proj(out.transpose(1, 2).reshape(b, s, d))"),
        _cls(
            _PROJ,
            "out = out.transpose(1, 2).contiguous().view(b, s, d)\n        out = self.proj(out)\n"
            "        return out",
        ),
        _cls(
            "self.W_o = nn.Parameter(torch.eye(d_model))", "return out.transpose(1, 2).flatten(2) @ self.W_o"
        ),
        _cls(
            "self.c_proj = nn.Linear(d_model, d_model)",
            "from einops import rearrange\n"
            "        return self.c_proj(rearrange(out, 'b h s d -> b s (h d)'))",
        ),
    )
    INVALID = (
        Invalid(  # per-head modules concatenated, nothing to mix the heads
            "import torch, torch.nn as nn\nclass MultiHead(nn.Module):\n    def __init__(self, heads):\n"
            "        super().__init__()\n        self.heads = nn.ModuleList(heads)\n"
            "    def forward(self, x):\n        return torch.cat([h(x) for h in self.heads], dim=-1)",
            line=7,
            message="concatenated",
            severity=Severity.WARNING,
        ),
        Invalid(_cls(_PROJ, "return out.transpose(1, 2).reshape(b, s, d)"), line=13, message="self.proj"),
        Invalid(
            _cls(
                _PROJ,
                "out = out.transpose(1, 2).contiguous().view(b, s, d)\n        self.proj(out)\n"
                "        return out",
            ),
            line=13,
        ),
        Invalid(
            _cls("", "from einops import rearrange\n        return rearrange(out, 'b h s d -> b s (h d)')"),
            line=14,
            severity=Severity.WARNING,
        ),
    )

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        klass = self.context.klass
        forward = klass.methods.get("forward") if klass is not None else None
        if klass is None or forward is None:
            return
        sem = semantics.of(self.context)
        merges = {
            id(call): call for call, tensor in sem.merges(forward) if sem.reaches_attention(tensor, forward)
        }
        concatenated = {id(call): call for call in forward.calls if _concatenates_heads(call, sem)}
        merge = self._unprojected_merge(sem, forward, merges | concatenated) if merges or concatenated else None
        if merge is None:
            return
        outs = [
            a for a in klass.attributes if projection_role(a) == "out" and sem.is_projection_module(klass, a)
        ]
        unused = [a for a in outs if not sem.references_outside_init(klass, a)]
        if unused:
            shown = ", ".join(f"self.{a}" for a in unused)
            self.report(
                merge,
                f"heads are merged and returned without the output projection: {shown} is "
                "defined but never applied (or its result is discarded)",
                hint=_HINT,
            )
        elif not outs and id(merge) in concatenated:
            self.report(
                merge,
                "the per-head outputs are concatenated and returned without an output projection (W_o): "
                "the heads never mix",
                severity=Severity.WARNING,
                hint="define self.proj = nn.Linear(n_embd, n_embd) and return self.proj(torch.cat(...))",
            )
        elif not outs and self._owns_projection(sem, klass):
            self.report(
                merge,
                "heads are merged and returned without an output projection (W_o): the class "
                "projects Q, K and V but defines none",
                severity=Severity.WARNING,
                hint=_HINT,
            )

    def _unprojected_merge(
        self, sem: semantics.Semantics, forward: FunctionFacts, merges: dict[int, cst.Call]
    ) -> cst.Call | None:
        for ret in sem.returns(forward):
            if ret.value is None:
                continue
            value = ret.value
            if isinstance(value, cst.Tuple) and value.elements:
                value = value.elements[0].value
            found = _find_merge(sem, value, forward, merges, set())
            if found is not None:
                return found
        return None

    def _owns_projection(self, sem: semantics.Semantics, klass: ClassFacts) -> bool:
        """Whether this class is a whole attention block, not the core of a BERT-style pair."""
        if _CORE_NAME.search(klass.name):
            return False
        for other in self.context.facts.classes.values():
            if other is klass:
                continue
            if any(
                isinstance(v, cst.Call) and sem.facts.canonical(v.func) == klass.name
                for values in other.attributes.values()
                for v in values
            ):
                return False  # used inside another module, which may project
        return any(projection_role(a) in {"q", "k", "v", "qkv"} for a in klass.attributes)


def _concatenates_heads(call: cst.Call, sem: semantics.Semantics) -> bool:
    """``torch.cat([h(x) for h in self.heads], dim=-1)``: the outputs of a list of head modules
    (an attribute named for heads), each called, concatenated (a comprehension, or
    ``tuple(...)``/``list(...)`` of one)."""
    if sem.facts.canonical(call.func) not in ("torch.cat", "torch.concat") or not call.args:
        return False
    pieces = call.args[0].value
    if type(pieces) is cst.Call and type(pieces.func) is cst.Name and pieces.func.value in ("tuple", "list"):
        pieces = pieces.args[0].value if pieces.args else pieces
    if type(pieces) not in (cst.ListComp, cst.GeneratorExp) or type(pieces.elt) is not cst.Call:
        return False
    head, loop = pieces.elt.func, pieces.for_in
    modules = self_attribute(loop.iter)
    return (
        type(head) is cst.Name
        and type(loop.target) is cst.Name
        and loop.target.value == head.value
        and modules is not None
        and "head" in modules.lower()  # self.heads, self.attention_heads: not a CNN's branches
    )


def _find_merge(
    sem: semantics.Semantics,
    expr: cst.BaseExpression,
    fn: FunctionFacts,
    merges: dict[int, cst.Call],
    seen: set[int],
) -> cst.Call | None:
    """The merge a returned value comes from with no projection on the way, else None."""
    if id(expr) in seen or len(seen) > 60:
        return None
    seen.add(id(expr))
    if isinstance(expr, cst.Call):
        if id(expr) in merges:
            return merges[id(expr)]
        if sem.is_projection_call(expr, fn):
            return None
        parts = [a.value for a in expr.args]
        if isinstance(expr.func, cst.Attribute) and self_attribute(expr.func) is None:
            parts.insert(0, expr.func.value)
    elif isinstance(expr, cst.Name):
        values = [v for v, _ in sem.values(expr, fn)]
        if any(isinstance(v, cst.Call) and sem.is_projection_call(v, fn) for v in values):
            return None
        parts = values
    elif isinstance(expr, cst.BinaryOperation):
        if isinstance(expr.operator, cst.MatrixMultiply) and sem.is_projection_call(
            cst.Call(func=cst.Name("matmul"), args=[cst.Arg(expr.left), cst.Arg(expr.right)]), fn
        ):
            return None
        parts = [expr.left, expr.right]
    elif isinstance(expr, cst.Subscript):
        parts = [expr.value]
    else:
        return None
    for part in parts:
        found = _find_merge(sem, part, fn, merges, seen)
        if found is not None:
            return found
    return None
