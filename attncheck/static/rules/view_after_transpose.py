"""ATT106 view-after-transpose: ``.view`` of a transposed tensor without ``.contiguous()``."""

from __future__ import annotations

import re

import libcst as cst
from libcst.metadata import PositionProvider

from attncheck.findings import Edit
from attncheck.static.engine import FileContext
from attncheck.static.patterns import (
    TRANSPARENT_METHODS,
    Tracer,
    base_name,
    is_transposed,
    method_name,
    receiver,
)
from attncheck.static.rule import Invalid, Rule

# ``.contiguous()`` is the one call that makes the view safe; ``.to``/``.clone``
# keep the transposed strides (``memory_format=torch.preserve_format``).
_KEEPS_STRIDES = TRANSPARENT_METHODS - {"contiguous"}
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
    )
    INVALID = (
        Invalid("out = out.transpose(1, 2).view(b, s, d)", line=1, message="transpose"),
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
    )

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self.tracer = Tracer(context.facts)

    def visit_Call(self, node: cst.Call) -> None:
        if method_name(node) != "view" or _is_dtype_view(node):
            return
        facts = self.context.facts
        source, _ = self.tracer.origin(receiver(node), self.context.function, through=_KEEPS_STRIDES)
        if not is_transposed(source, facts):
            return
        assert isinstance(node.func, cst.Attribute)
        shown = self.context.module.code_for_node(source)
        self.report(
            node,
            f".view() of `{_shorten(shown)}`, whose strides a transpose reordered and no "
            ".contiguous() restored: view raises 'view size is not compatible with input "
            "tensor's size and stride' (some GPU fast paths hide it)",
            hint="use .reshape(...) (copies only when needed), or call .contiguous() before .view(...)",
            evidence=[f"transposed at: {_shorten(shown)}"],
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
