"""ATT105 head-merge-layout: ``(b, h, s, dh)`` merged with ``view(b, s, d)``, no transpose back."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from attncheck.static.analysis import calls, semantics
from attncheck.static.analysis.patterns import (
    dim_role,
    is_heads_first_product,
    mentions_heads,
    method_name,
    shape_arguments,
    tracer,
)
from attncheck.static.context import FileContext
from attncheck.static.facts import FunctionFacts, self_attribute
from attncheck.static.rule import Invalid, Rule


class HeadMergeLayout(Rule):
    code = "ATT105"
    PREFILTER = ("view", "reshape")
    VALID = (
        "def f(self, w, v, b, s):\n    x = v.reshape(b * self.num_heads, s, -1)\n"
        "    return torch.bmm(w, x).view(b, self.num_heads, s, -1)",
        "def f(self, a, v, b, s):\n    o = a @ v\n    return o.transpose(1, 2).reshape(b, s, -1)",
        "def f(self, a, v, b, s, d):\n    o = torch.matmul(a, v).permute(0, 2, 1, 3).contiguous()\n"
        "    return o.view(b, s, d)",
        "def f(self, a, v, b, s):\n    o = torch.bmm(a, v)\n"
        "    return o.view(b, self.num_heads, s, self.head_dim)",
        "def f(self, a, v):\n    o = torch.einsum('bqhk,bkhd->bqhd', a, v)\n"
        "    return o.reshape(a.size(0), a.size(1), -1)",
        "def f(self, o):\n    return einops.rearrange(o, 'b h s d -> b s (h d)')",
        # a merge helper given the output already transposed back.
        "class A:\n    def _merge(self, t, b, s):\n        return t.contiguous().view(b, s, -1)\n"
        "    def forward(self, a, v, b, s):\n        return self._merge((a @ v).transpose(1, 2), b, s)",
    )
    INVALID = (
        Invalid(  # a buffer allocated heads-first, filled per head
            "def f(self, x, b, l):\n    out = torch.zeros(self.num_heads, b, l, self.head_dim)\n"
            "    return out.view(b, l, -1)",
            line=3,
            message="heads before",
        ),
        Invalid(  # folded batch-major, unfolded head-major
            "def f(self, q, w, v, b, s):\n    q = q.reshape(b * self.num_heads, s, -1)\n"
            "    return torch.bmm(w, v).view(self.num_heads, b, s, -1)",
            line=3,
            message="head-major",
        ),
        Invalid(
            "def f(self, q, k, v, N, S, E):\n    a = torch.softmax(q @ k.transpose(-2, -1), dim=-1)\n"
            "    return torch.matmul(a, v).reshape(N, S, E)",
            line=3,
            message="transposing",
        ),
        Invalid(
            "def f(self, x, v, b, s):\n    w = F.softmax(x, dim=-1)\n    w = self.dropout(w)\n"
            "    ctx = w @ v\n    ctx = ctx.contiguous().view(b, s, self.d_model)\n    return ctx",
            line=5,
        ),
        Invalid(
            "def f(self, q, k, v, B, T, C):\n"
            "    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
            "    return y.reshape(B, T, C)",
            line=3,
        ),
        Invalid(
            "def f(self, p, v, b, n):\n    out = torch.einsum('bhij,bhjd->bhid', p, v)\n"
            "    return out.reshape(b, n, -1)",
            line=3,
        ),
        Invalid(  # folded head-major in a helper method, unfolded batch-major
            "class A:\n    def split(self, x, b, s):\n"
            "        return x.view(b, s, self.h, -1).permute(2, 0, 1, 3).reshape(self.h * b, s, -1)\n"
            "    def forward(self, x, w, b, s):\n        v = self.split(x, b, s)\n"
            "        return torch.bmm(w, v).view(b, self.h, s, -1)",
            line=6,
            message="batch-major",
        ),
        Invalid(  # a merge helper whose caller hands it the heads-first output
            "class A:\n    def _merge(self, t):\n        B, nh, T, hs = t.size()\n"
            "        return t.contiguous().view(B, T, nh * hs)\n"
            "    def forward(self, a, v):\n        return self._merge(a @ v)",
            line=4,
            message="heads before",
        ),
    )

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self.tracer = tracer(context)

    def visit_Call(self, node: cst.Call) -> None:
        if method_name(node) not in ("view", "reshape") or not isinstance(node.func, cst.Attribute):
            return
        sizes = shape_arguments(node)
        if sizes is not None and len(sizes) == 4:
            self._check_unfold(node, sizes)
        if sizes is None or len(sizes) != 3 or any(mentions_heads(size) for size in sizes[:2]):
            return
        if dim_role(sizes[1]) in ("head_dim", "model"):
            return
        fn = self.context.function
        source = self._heads_first(node.func.value, fn)
        if source is None:
            return
        shown = self.context.module.code_for_node
        sizes_text = ", ".join(shown(size) for size in sizes)
        self.report(
            node,
            f"a result with the heads before the sequence axis (`{shown(source)}`) is merged with "
            f"{node.func.attr.value}({sizes_text}) without transposing the heads axis back after the "
            "sequence axis: rows of the output mix tokens and heads",
            hint=f"merge with .transpose(1, 2).reshape({sizes_text}) "
            f"(or .transpose(1, 2).contiguous().view({sizes_text}))",
            evidence=[f"heads-first tensor from `{shown(source)}`"],
        )

    def _heads_first(self, tensor: cst.BaseExpression, fn: FunctionFacts | None) -> cst.BaseExpression | None:
        """Where ``tensor`` gets its (heads before sequence) layout, or None: attention's
        ``(b, h, s, dh)`` output here or returned by a helper method of the class
        (``o = self._attend(q, k, v)``), or a buffer allocated heads-first and filled per head
        (``torch.zeros(h, b, l, dv)``)."""
        source, where = self.tracer.origin(tensor, fn)
        if is_heads_first_product(source, self.tracer, where) or _allocated_heads_first(source, self.context):
            return source
        if type(source) is cst.Name and where is not None and source.value in where.params:
            # a merge helper (``def _merge(self, t)``): what its callers in the file hand it.
            for argument, caller in calls.passed(where, source.value, self.context.facts):
                value, inner = self.tracer.origin(argument, caller)
                if is_heads_first_product(value, self.tracer, inner):
                    return value
            return None
        attr = self_attribute(source.func) if type(source) is cst.Call else None
        helper = where.owner.methods.get(attr) if where is not None and where.owner is not None and attr else None
        if helper is None or helper is where:
            return None
        for returned in semantics.of(self.context).returns(helper):
            if returned.value is not None:
                value, inner = self.tracer.origin(returned.value, helper)
                if is_heads_first_product(value, self.tracer, inner):
                    return source
        return None

    def _check_unfold(self, node: cst.Call, sizes: Sequence[cst.BaseExpression]) -> None:
        """``o.view(h, b, s, dh)`` of heads folded batch-major (``reshape(b * h, s, dh)``), or
        ``o.view(b, h, s, dh)`` of heads folded head-major (``h * b``): the unfold puts each
        example's rows under another example."""
        fn = self.context.function
        heads_first = mentions_heads(sizes[0]) and not mentions_heads(sizes[1])
        if fn is None or not (heads_first or (mentions_heads(sizes[1]) and not mentions_heads(sizes[0]))):
            return
        folds = [order for call in _calls_and_helpers(fn) if (order := _fold_order(call)) is not None]
        if not folds or any(order == heads_first for order in folds):
            return
        shown = self.context.module.code_for_node
        self.report(
            node,
            f"`{shown(node)}` unfolds the heads {'head' if heads_first else 'batch'}-major, but this function "
            f"(or a helper it calls) folds them {'batch' if heads_first else 'head'}-major "
            f"(`{'b * h' if heads_first else 'h * b'}`): "
            "each example's output rows are taken from other examples and heads",
            hint="unfold in the order of the fold: reshape(b * h, ...) is undone by view(b, h, ...)",
        )


def _calls_and_helpers(fn: FunctionFacts) -> list[cst.Call]:
    """The calls of ``fn`` and of the methods of its class it calls (``self.split(x)``, where the
    heads are folded into the batch)."""
    found = list(fn.calls)
    owner = fn.owner
    if owner is not None:
        for call in fn.calls:
            helper = owner.methods.get(self_attribute(call.func) or "")
            if helper is not None and helper is not fn:
                found.extend(helper.calls)
    return found


def _fold_order(call: cst.Call) -> bool | None:
    """For ``x.reshape(b * h, s, dh)`` False (batch-major), for ``x.view(h * b, s, dh)`` True
    (heads first); None for any other call."""
    if method_name(call) not in ("view", "reshape"):
        return None
    sizes = shape_arguments(call)
    if sizes is None or len(sizes) != 3:
        return None
    first = sizes[0]
    if type(first) is not cst.BinaryOperation or type(first.operator) is not cst.Multiply:
        return None
    left, right = mentions_heads(first.left), mentions_heads(first.right)
    return left if left != right else None


_ALLOCATORS = frozenset({"torch.zeros", "torch.empty", "torch.ones", "torch.randn"})


def _allocated_heads_first(source: cst.BaseExpression, context: FileContext) -> bool:
    """``torch.zeros(self.h, b, l, dv)``: a 4-D buffer whose first size is the head count."""
    if type(source) is not cst.Call:
        return False
    allocator = context.facts.canonical(source.func) in _ALLOCATORS
    if not allocator and method_name(source) not in ("new_zeros", "new_empty"):
        return False
    sizes = [a.value for a in source.args if a.keyword is None and not a.star]  # device=, dtype= aside
    if len(sizes) == 1 and type(sizes[0]) in (cst.Tuple, cst.List):
        sizes = [e.value for e in sizes[0].elements]
    return len(sizes) == 4 and mentions_heads(sizes[0]) and not mentions_heads(sizes[1])
