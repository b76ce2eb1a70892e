"""ATT106 view-after-transpose: ``.view`` of a transposed tensor without ``.contiguous()``.

An error when the view must merge dims the transpose separated in memory (the
classic ``x.transpose(1, 2).view(b, s, h * dh)``), nothing when the view is
compatible with the transposed strides (it merges dims still adjacent, only
splits, adds singletons or keeps the shape), a warning when the sizes do not say.
"""

from __future__ import annotations

import re

import libcst as cst
from libcst.metadata import PositionProvider

from attncheck.findings import Edit, Severity
from attncheck.static.analysis.patterns import base_name, method_name, receiver, shape_arguments, tracer
from attncheck.static.context import FileContext
from attncheck.static.rule import Invalid, Rule
from attncheck.static.rules.att1_projections.strides import reordering, view_verdict

_DTYPE = re.compile(r"^(u?int\d*|float\d*|bfloat16|half|double|bool|complex\d*|\w*dtype)$")


class ViewAfterTranspose(Rule):
    code = "ATT106"
    PREFILTER = (".view(",)
    VALID = (
        "out = out.transpose(1, 2).contiguous().view(b, s, d)",
        "out = out.transpose(1, 2).reshape(b, s, d)",
        "def f(x, b, s):\n    y = x.permute(0, 2, 1, 3).contiguous()\n    return y.view(b, s, -1)",
        "q = q.view(b, s, h, dh).transpose(1, 2)",
        "bits = x.T.view(torch.int16)",
        # DeiT/DINOv2 position embeddings: h and w stay adjacent after the permute.
        "def f(pos, dim):\n    return pos.permute(0, 2, 3, 1).view(1, -1, dim)",
        # CvT: only splits the last dim; SegGPT: adds a singleton.
        "def f(x):\n    b, n, c = x.shape\n    return x.permute(0, 2, 1).view(b, c, h, w)",
        "def f(m):\n    c, h, w = m.shape\n    return m.permute(1, 2, 0).view(h, w, 1, c)",
        # SpeechT5: a rank-3 product viewed to the same rank keeps its shape.
        "def f(self, q, pos, b):\n    rq = q.contiguous().view(b * self.num_heads, -1, self.head_dim).transpose(0, 1)\n"
        "    bias = torch.matmul(rq, pos.transpose(-2, -1))\n"
        "    return bias.transpose(0, 1).view(b * self.num_heads, pos.size(0), pos.size(1))",
        # Wav2Vec2-Conformer rotary: the second transpose restores the layout.
        "def f(self, x, cos, sin, b, s):\n    x = x.view(b, s, self.num_heads, self.head_size).transpose(0, 1)\n"
        "    x = (x * cos) + (torch.cat((-x, x), dim=-1) * sin)\n    x = x.transpose(0, 1)\n"
        "    return x.view(b, s, self.num_heads * self.head_size)",
        # timm NonLocalAttn: ``self.t`` is a convolution, not ``Tensor.t()``.
        "def f(self, x):\n    t = self.t(x)\n    return t.view(B, C, -1)",
    )
    INVALID = (
        Invalid("out = out.transpose(1, 2).view(b, s, d)", line=1, message="transpose",
                fixed="out = out.transpose(1, 2).reshape(b, s, d)"),
        Invalid("def f(x, b, s):\n    y = x.permute(0, 2, 1, 3)\n    return y.view(b, s, -1)", line=3),
        Invalid(
            "def f(ctx, b, s):\n    y = torch.transpose(ctx, 1, 2).float()\n    return y.view(b, s, -1)",
            line=3,
        ),
        Invalid("z = w.mT.view(-1)", line=1, message="mT"),
        Invalid(
            "def f(a, v, b, s, d):\n    o = torch.matmul(a, v).transpose(1, 2)\n"
            "    o = o.view(b, s, d)\n    return o",
            line=3,
        ),
        # diffusers attention_processor.py: SDPA's (b, h, s, d) output, h and d merged after the transpose.
        Invalid(
            "def f(q, k, v, b, attn, head_dim):\n    o = F.scaled_dot_product_attention(q, k, v)\n"
            "    return o.transpose(1, 2).view(b, -1, attn.heads * head_dim)",
            line=3,
            message="separated",
            severity=Severity.ERROR,
        ),
        Invalid("def f(x, b, h):\n    return x.permute(0, 2, 3, 1).view(b, h, -1)", line=2, severity=Severity.ERROR),
        Invalid("def f(x, m, n):\n    return x.transpose(1, 2).view(m, n)", line=2, severity=Severity.WARNING),
    )

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self.tracer = tracer(context)

    def visit_Call(self, node: cst.Call) -> None:
        if method_name(node) != "view" or _is_dtype_view(node):
            return
        found = reordering(receiver(node), self.tracer, self.context.function)
        if found is None:
            return
        verdict = view_verdict(found, shape_arguments(node))
        if verdict == "compatible":
            return
        assert isinstance(node.func, cst.Attribute)
        shown = _shorten(self.context.module.code_for_node(found.first))
        if verdict == "separated":
            message = (
                f".view() of `{shown}` merges dims that the transpose separated in memory, and no "
                ".contiguous() restored the layout: view raises 'view size is not compatible with input "
                "tensor's size and stride' (some GPU fast paths hide it)"
            )
        else:
            message = (
                f".view() of `{shown}`, whose strides a transpose reordered and no .contiguous() "
                "restored: if the view merges dims the transpose separated it raises 'view size is not "
                "compatible with input tensor's size and stride' (the sizes do not say whether it does)"
            )
        self.report(
            node,
            message,
            severity=None if verdict == "separated" else Severity.WARNING,
            hint="use .reshape(...) (copies only when needed), or call .contiguous() before .view(...)",
            evidence=[f"transposed at: {shown}"],
            fix=(self._reshape_edit(node.func.attr),),
        )

    def _reshape_edit(self, attr: cst.Name) -> Edit:
        position = self.get_metadata(PositionProvider, attr).start
        start = self.context.offset(position.line, position.column)
        return Edit(start, start + len("view"), "reshape")


def _is_dtype_view(node: cst.Call) -> bool:
    """``x.view(torch.int16)`` reinterprets the bytes; strides do not matter there."""
    if len(node.args) != 1:
        return False
    name = base_name(node.args[0].value) or ""
    return bool(_DTYPE.match(name))


def _shorten(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
