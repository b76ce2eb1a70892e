"""ATT104 head-split-layout: ``(b, s, d)`` split with ``view(b, h, s, dh)``, no transpose."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from attncheck.static.analysis.patterns import (
    dim_role,
    is_model_input,
    mentions_heads,
    method_name,
    shape_arguments,
    tracer,
)
from attncheck.static.context import FileContext
from attncheck.static.rule import Invalid, Rule


class HeadSplitLayout(Rule):
    code = "ATT104"
    PREFILTER = ("view", "reshape")
    VALID = (
        "def f(self, x):\n    b, s, _ = x.shape\n"
        "    return self.q(x).view(b, s, self.num_heads, self.d_k).transpose(1, 2)",
        "def f(self, x):\n    B, T, C = x.size()\n"
        "    return self.k(x).reshape(B, T, self.n_head, C // self.n_head).permute(0, 2, 1, 3)",
        "def f(self, x):\n    return einops.rearrange(self.q(x), 'b s (h d) -> b h s d', h=self.heads)",
        "def f(self, x, bsz, tgt_len):\n    w = torch.bmm(x, x.transpose(1, 2))\n"
        "    return w.view(bsz, self.num_heads, tgt_len, self.head_dim)",
        "def f(self, x, b, n):\n    return self.to_q(x).view(b, n, self.heads, -1).transpose(1, 2)",
        "def f(self, x):\n    b, s, _ = x.shape\n"
        "    q = self.q(x).view(b, s, self.num_heads, self.d_k).transpose(1, 2)\n"
        "    return q.reshape(b * self.num_heads, s, self.d_k)",
        # Bloom's merge: a (b * h, s, dh) tensor unfolded, its batch size divided out of the first axis
        "def _merge_heads(self, x):\n    batch_size_and_num_heads, seq_length, _ = x.shape\n"
        "    batch_size = batch_size_and_num_heads // self.num_heads\n"
        "    x = x.view(batch_size, self.num_heads, seq_length, self.head_dim)\n"
        "    return x.permute(0, 2, 1, 3).reshape(batch_size, seq_length, -1)",
    )
    INVALID = (
        Invalid(
            "def f(self, x):\n    b, s, _ = x.shape\n"
            "    return self.q(x).view(b, self.num_heads, s, self.d_k)",
            line=3,
            message="num_heads",
        ),
        Invalid(
            "def f(self, query):\n    N, S, E = query.shape\n    H = self.n_head\n"
            "    return query.reshape(N, H, S, E // H)",
            line=4,
        ),
        Invalid(
            "def f(self, x, batch_size, seq_len):\n    q = self.W_q(x)\n"
            "    q = q.view(batch_size, self.num_heads, -1, self.d_k)\n    return q",
            line=3,
        ),
        Invalid(
            "def f(self, x, B, T):\n    q, k, v = self.qkv(x).chunk(3, dim=-1)\n"
            "    return torch.reshape(k, (B, self.n_heads, T, self.head_dim))",
            line=3,
        ),
        Invalid(
            "def f(self, x):\n    b, s, _ = x.shape\n    return self.q(x).view(b * self.num_heads, -1, self.d_k)",
            line=3,
            message="folded",
        ),
    )

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self.tracer = tracer(context)

    def visit_Call(self, node: cst.Call) -> None:
        facts = self.context.facts
        split = _split_call(node, facts.canonical(node.func))
        if split is None:
            return
        tensor, sizes = split
        swap = _heads_before_seq(sizes)
        fn = self.context.function
        # a parameter may arrive already split into heads: folding it is fine, so only a projection's
        # (batch, seq, d_model) output counts for the folded spelling
        folded = swap is None and _heads_folded(sizes) and type(self.tracer.origin(tensor, fn)[0]) is not cst.Name
        if (swap is None and not folded) or not is_model_input(tensor, self.tracer, fn):
            return
        if swap is not None and self._batch_unfolded(sizes[0]):
            return  # ``view(b, h, s, dh)`` of a (b * h, s, dh) tensor: the heads come back out of the batch
        shown = [self.context.module.code_for_node(size) for size in sizes]
        if folded:
            self.report(
                node,
                f"a (batch, seq, d_model) tensor is viewed as ({', '.join(shown)}) with the heads folded into "
                "the batch axis and no transpose: each 'head' is a slab of memory that mixes tokens, not one "
                "slice of every token's features",
                hint=f"split as (batch, seq, heads, head_dim), .transpose(1, 2), then .reshape({', '.join(shown)})",
                evidence=[f"heads folded into the first axis `{shown[0]}` of a (batch, seq, d_model) tensor"],
            )
            return
        heads, seq = swap
        fixed = list(shown)
        fixed[heads], fixed[seq] = shown[seq], shown[heads]
        self.report(
            node,
            f"a (batch, seq, d_model) tensor is split into heads with ({', '.join(shown)}): "
            f"`{shown[heads]}` comes before the sequence axis, so each head reads a slab of "
            "memory that mixes tokens instead of one slice of every token's features",
            hint=f"split as ({', '.join(fixed)}) and then .transpose({heads}, {seq})",
            evidence=[f"heads axis `{shown[heads]}` at position {heads}, sequence axis at {seq}"],
        )


    def _batch_unfolded(self, batch: cst.BaseExpression) -> bool:
        """The batch size is the tensor's first axis divided by the head count (Bloom's
        ``batch_size = batch_size_and_num_heads // self.num_heads``): the tensor holds b * h rows."""
        value = self.context.facts.resolve(batch, self.context.function)
        return (
            type(value) is cst.BinaryOperation
            and type(value.operator) is cst.FloorDivide
            and mentions_heads(value.right)
        )


def _split_call(
    node: cst.Call, canonical: str | None
) -> tuple[cst.BaseExpression, Sequence[cst.BaseExpression]] | None:
    """The tensor and the sizes of ``x.view(...)``, ``x.reshape(...)``, ``torch.reshape(x, shape)``."""
    if canonical == "torch.reshape" and len(node.args) == 2:
        shape = node.args[1].value
        if isinstance(shape, (cst.Tuple, cst.List)):
            return node.args[0].value, [e.value for e in shape.elements]
        return None
    if method_name(node) in ("view", "reshape") and isinstance(node.func, cst.Attribute):
        sizes = shape_arguments(node)
        return (node.func.value, sizes) if sizes is not None else None
    return None


def _heads_folded(sizes: Sequence[cst.BaseExpression]) -> bool:
    """``(b * h, s, dh)``, ``(bsz * num_heads, -1, head_dim)``: the heads folded into the batch axis
    straight from a (batch, seq, d_model) tensor, before the sequence axis."""
    if len(sizes) != 3 or type(sizes[0]) is not cst.BinaryOperation or type(sizes[0].operator) is not cst.Multiply:
        return False
    roles = [dim_role(size) for size in sizes[1:]]
    return (
        {dim_role(sizes[0].left), dim_role(sizes[0].right)} == {"batch", "heads"}
        and roles[0] in ("seq", "rest")
        and roles[1] in ("head_dim", "rest")
        and roles != ["rest", "rest"]
    )


def _heads_before_seq(sizes: Sequence[cst.BaseExpression]) -> tuple[int, int] | None:
    """Positions (heads, seq) when a heads size precedes the sequence size and a
    per-head size comes last: ``(b, h, s, dh)``, ``(b, h, -1, dh)``."""
    if len(sizes) < 4:
        return None
    roles = [dim_role(size) for size in sizes]
    if roles[0] == "heads" or roles[-1] not in ("head_dim", "rest"):
        return None
    heads = next((i for i, role in enumerate(roles[1:-1], start=1) if role == "heads"), None)
    if heads is None:
        return None
    seq = next((i for i in range(heads + 1, len(roles) - 1) if roles[i] in ("seq", "rest")), None)
    if seq is None or (roles[-1] == "rest" and roles[seq] == "rest"):
        return None
    return heads, seq
