"""ATT105 head-merge-layout: ``(b, h, s, dh)`` merged with ``view(b, s, d)``, no transpose back."""

from __future__ import annotations

import libcst as cst

from attncheck.static.analysis.patterns import (
    dim_role,
    is_heads_first_product,
    mentions_heads,
    method_name,
    shape_arguments,
    tracer,
)
from attncheck.static.context import FileContext
from attncheck.static.rule import Invalid, Rule


class HeadMergeLayout(Rule):
    code = "ATT105"
    PREFILTER = ("view", "reshape")
    VALID = (
        "def f(self, a, v, b, s):\n    o = a @ v\n    return o.transpose(1, 2).reshape(b, s, -1)",
        "def f(self, a, v, b, s, d):\n    o = torch.matmul(a, v).permute(0, 2, 1, 3).contiguous()\n"
        "    return o.view(b, s, d)",
        "def f(self, a, v, b, s):\n    o = torch.bmm(a, v)\n"
        "    return o.view(b, self.num_heads, s, self.head_dim)",
        "def f(self, a, v):\n    o = torch.einsum('bqhk,bkhd->bqhd', a, v)\n"
        "    return o.reshape(a.size(0), a.size(1), -1)",
        "def f(self, o):\n    return einops.rearrange(o, 'b h s d -> b s (h d)')",
    )
    INVALID = (
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
    )

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self.tracer = tracer(context)

    def visit_Call(self, node: cst.Call) -> None:
        if method_name(node) not in ("view", "reshape") or not isinstance(node.func, cst.Attribute):
            return
        sizes = shape_arguments(node)
        if sizes is None or len(sizes) != 3 or any(mentions_heads(size) for size in sizes[:2]):
            return
        if dim_role(sizes[1]) in ("head_dim", "model"):
            return
        fn = self.context.function
        source, _ = self.tracer.origin(node.func.value, fn)
        if not is_heads_first_product(source, self.tracer, fn):
            return
        shown = self.context.module.code_for_node
        sizes_text = ", ".join(shown(size) for size in sizes)
        self.report(
            node,
            f"a (batch, heads, seq, head_dim) result (`{shown(source)}`) is merged with "
            f"{node.func.attr.value}({sizes_text}) without transposing the heads axis back after the "
            "sequence axis: rows of the output mix tokens and heads",
            hint=f"merge with .transpose(1, 2).reshape({sizes_text}) "
            f"(or .transpose(1, 2).contiguous().view({sizes_text}))",
            evidence=[f"heads-first tensor from `{shown(source)}`"],
        )
