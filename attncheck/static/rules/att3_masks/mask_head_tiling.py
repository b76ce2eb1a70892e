"""ATT306 mask-head-tiling: a per-example mask tiled to ``(b * h, ...)`` head-major with ``.repeat``.

``nn.MultiheadAttention``'s 3-D ``attn_mask`` and every ``view(b * h, ...)`` fold of the heads
into the batch are batch-major: row ``i`` is example ``i // h``, head ``i % h``. ``mask.repeat(h,
1, 1)`` stacks whole copies of the batch (row ``i`` is example ``i % b``), so example 0's heads
get the masks of examples 0, 1, 2, ...: padding of one sentence is applied to another.
``mask.repeat_interleave(h, dim=0)`` is the batch-major tiling.
"""

from __future__ import annotations

import re

import libcst as cst

from attncheck.static.analysis.patterns import argument, literal_is, method_name, receiver, tracer
from attncheck.static.analysis.syntax import _HEAD_COUNT
from attncheck.static.context import FileContext
from attncheck.static.rule import Invalid, Rule

# A mask of one example per row: padding or an attention mask, not a causal triangle shared by all.
_PER_EXAMPLE = re.compile(r"mask|pad", re.IGNORECASE)
_SHARED = re.compile(r"causal|tril|triu|future|subsequent|look_?ahead|square|bias|alibi", re.IGNORECASE)


class MaskHeadTiling(Rule):
    code = "ATT306"
    PREFILTER = (".repeat(", "tile(")
    VALID = (
        "def f(self, x, key_padding_mask):\n    b, t, _ = x.shape\n"
        "    m = key_padding_mask[:, None, :].expand(b, t, t).repeat_interleave(self.nhead, dim=0)\n"
        "    return self.mha(x, x, x, attn_mask=m)",
        # A causal triangle shared by every example may be tiled any way.
        "def f(self, x, t):\n    causal_mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)\n"
        "    return self.mha(x, x, x, attn_mask=causal_mask.repeat(self.num_heads, 1, 1))",
        # Tiled along the head axis and folded batch-major.
        "def f(mask, b, t, num_heads):\n"
        "    return mask.unsqueeze(1).repeat(1, num_heads, 1, 1).view(b * num_heads, t, t)",
        # Tiled to b * h rows from one example's mask.
        "def f(attn_mask, bsz, num_heads):\n    return attn_mask.repeat(bsz * num_heads, 1, 1)",
        # An input with no "mask" in its name, tiled batch-major.
        "def f(self, x, keep):\n    b, s, _ = x.shape\n    block = ~keep[:, None, :].expand(b, s, s)\n"
        "    return self.attn(x, x, x, attn_mask=block.repeat_interleave(self.nhead, dim=0))",
        # A tensor input that is no mask (never negated or compared) tiled by the head count.
        "def f(pos_emb, num_heads):\n    return pos_emb.repeat(num_heads, 1, 1)",
    )
    INVALID = (
        Invalid(
            "def f(self, x, key_padding_mask):\n    b, t, _ = x.shape\n"
            "    m = key_padding_mask.unsqueeze(1).expand(b, t, t).repeat(self.nhead, 1, 1)\n"
            "    return self.mha(x, x, x, attn_mask=m)",
            line=3,
            message="batch-major",
        ),
        Invalid("def f(src_mask, n_heads):\n    return torch.tile(src_mask, (n_heads, 1, 1))", line=2),
        Invalid(
            "def f(self, x, keep):\n    b, s, _ = x.shape\n    block = ~keep[:, None, :].expand(b, s, s)\n"
            "    return self.attn(x, x, x, attn_mask=block.repeat(self.nhead, 1, 1))",
            line=4,
        ),
    )

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self.tracer = tracer(context)

    def visit_Call(self, node: cst.Call) -> None:
        tiled = self._tiled_by_heads(node)
        if tiled is None:
            return
        origin, _ = self.tracer.origin(tiled, self.context.function)
        names = self.context.module.code_for_node(tiled) + " " + self.context.module.code_for_node(origin)
        if _SHARED.search(names) or not (_PER_EXAMPLE.search(names) or self._from_an_input(tiled)):
            return
        shown = self.context.module.code_for_node(node)
        self.report(
            node,
            f"`{shown}` tiles a per-example mask head-major (all of the batch, then all of it again), "
            "but the (batch * heads) layout of nn.MultiheadAttention and of view(b * h, ...) is "
            "batch-major: each example's heads get the masks of other examples",
            hint="tile with mask.repeat_interleave(num_heads, dim=0), or repeat along a head axis "
            "(mask.unsqueeze(1).repeat(1, h, 1, 1)) and fold that",
            evidence=[f"tiled: {self.context.module.code_for_node(tiled)}", "first axis repeated by the head count"],
        )

    def _from_an_input(self, tensor: cst.BaseExpression) -> bool:
        """Whether ``tensor`` is a mask made from one of the function's inputs, negated or compared
        on the way and otherwise only reshaped (``~keep[:, None, :].expand(b, s, s)``): a mask the
        caller passes holds one row per example, whatever its name; a triangle built here does not."""
        fn = self.context.function
        node: cst.BaseExpression | None = tensor
        boolean = False
        for _ in range(12):
            if type(node) is cst.Name:
                if fn is not None and node.value in fn.params and node.value != "self":
                    return boolean
                stepped = self.tracer.step(node, fn)
                node = stepped[0] if stepped is not None else None
            elif type(node) is cst.UnaryOperation:
                boolean = boolean or type(node.operator) is cst.BitInvert
                node = node.expression
            elif type(node) is cst.Comparison:
                boolean, node = True, node.left
            elif type(node) is cst.Call and method_name(node) in ("bool", "logical_not"):
                boolean, node = True, receiver(node)
            elif type(node) is cst.Subscript:
                node = node.value
            elif type(node) is cst.Call and type(node.func) is cst.Attribute:
                node = node.func.value
            else:
                return False
        return False

    def _tiled_by_heads(self, node: cst.Call) -> cst.BaseExpression | None:
        """The tensor of ``t.repeat(h, 1, ...)`` or ``torch.tile(t, (h, 1, ...))`` where ``h`` is a
        head count alone (``b * h`` copies of a one-example mask are fine)."""
        if method_name(node) == "repeat":
            tensor, counts = receiver(node), [a.value for a in node.args]
        elif self.context.facts.canonical(node.func) == "torch.tile" and len(node.args) == 2:
            tensor, counts = node.args[0].value, [argument(node, 1, "dims")]
        else:
            return None
        if len(counts) == 1 and type(counts[0]) in (cst.Tuple, cst.List):
            counts = [e.value for e in counts[0].elements]
        if len(counts) < 2 or not all(literal_is(c, 1) for c in counts[1:]):
            return None
        first = counts[0]
        label = first.value if type(first) is cst.Name else (
            first.attr.value if type(first) is cst.Attribute else None
        )
        return tensor if label is not None and _HEAD_COUNT.search(label) else None
