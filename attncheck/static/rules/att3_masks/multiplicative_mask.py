"""ATT301 multiplicative-mask: a mask must push blocked scores to -inf, not to 0."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from attncheck.static.analysis import rope as rp
from attncheck.static.analysis import semantics, syntax
from attncheck.static.analysis.flow import reaching
from attncheck.static.facts import FileFacts, FunctionFacts
from attncheck.static.rule import Invalid, Rule

_HINT = "fill the blocked scores before the softmax: scores = scores.masked_fill(mask == 0, float('-inf'))"

_FN = """
import math, torch, torch.nn.functional as F
def attention(q, k, v, mask):
    '''q, k, v: (batch, heads, seq, head_dim); mask: 1 = keep, 0 = blocked.'''
    scores = {scores}
    {line}
    return F.softmax(scores, dim=-1) @ v
"""

_SDPA = """import torch, torch.nn.functional as F
def causal(q, k, v):
    t = q.size(-2)
    mask = {mask}
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
"""


def _fn(line: str, scores: str = "q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))") -> str:
    return _FN.replace("{scores}", scores).replace("{line}", line)


class MultiplicativeMask(Rule):
    code = "ATT301"
    PREFILTER = ("mask", "tril", "triu")
    VALID = (
        _SDPA.replace("{mask}", "torch.tril(torch.ones(t, t)).bool()"),
        _SDPA.replace("{mask}", "torch.triu(torch.full((t, t), float('-inf')), diagonal=1)"),
        _fn("scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)"),
        _fn("scores = scores + (1.0 - mask) * -10000.0"),
        _fn("scores = scores + torch.where(mask.bool(), 0.0, float('-inf'))"),
        _fn("scores = scores + (1 - mask.float()) * torch.finfo(scores.dtype).min"),
        _fn("scores = scores * mask - 1e4 * (1 - mask)"),
        # Attention pooling (no q/k/v): the padding mask fills the scores, or is added as 0 / -1e4.
        "import torch\ndef pool(self, x, mask):\n    w = self.score(x).squeeze(-1).masked_fill(mask == 0, -1e4)\n"
        "    return (torch.softmax(w, dim=-1).unsqueeze(-1) * x).sum(1)",
        "import torch, torch.nn.functional as F\ndef pool(self, h, attention_mask):\n"
        "    e = self.context(torch.tanh(self.proj(h))).squeeze(-1)\n"
        "    e = e + (1.0 - attention_mask.float()) * -10000.0\n"
        "    return torch.bmm(F.softmax(e, dim=-1).unsqueeze(1), h).squeeze(1)",
        "import torch\ndef pool(features, w, lengths_mask):\n    logits = (features * w).sum(-1)\n"
        "    alpha = torch.where(lengths_mask, logits, torch.finfo(logits.dtype).min).softmax(-1)\n"
        "    return (alpha[..., None] * features).sum(dim=1)",
        # Masked after the softmax and renormalised (ATT203's business, and right).
        "def pool(features, scorer, mask):\n    a = scorer(features).squeeze(-1).softmax(-1) * mask\n"
        "    a = a / a.sum(-1, keepdim=True)\n    return (a[..., None] * features).sum(dim=1)",
        "import torch\ndef attention(q, k, attention_mask):\n"
        "    return torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / 8 + attention_mask, dim=-1)",
    )
    INVALID = (
        Invalid(_SDPA.replace("{mask}", "torch.tril(torch.ones(t, t))"), line=5, message="attn_mask"),
        Invalid(_fn("scores = scores * mask"), line=6, message="multiplied"),
        Invalid(_fn("", scores="mask * torch.matmul(q, k.transpose(-2, -1)) / 8"), line=5),
        Invalid(_fn("scores = torch.mul(scores, mask)"), line=6),
        Invalid(_fn("scores = scores + mask"), line=6, message="0/1"),
        Invalid(
            _fn("causal = torch.tril(torch.ones(q.size(2), q.size(2)))\n    scores = scores + causal"),
            line=7,
            message="tril",
        ),
        Invalid(
            "import torch\ndef f(q, k, v):\n    s = torch.einsum('bhqd,bhkd->bhqk', q, k) / 8\n"
            "    keep = s.new_ones(s.shape[-2:]).tril() > 0\n"
            "    return torch.softmax(s * keep, dim=-1) @ v",
            line=5,
        ),
        Invalid(  # attention pooling: no q/k/v, one learned score per position
            "import torch\ndef pool(self, x, mask):\n    w = self.score(x).squeeze(-1)\n"
            "    return (torch.softmax(w * mask, dim=-1).unsqueeze(-1) * x).sum(1)",
            line=4,
            message="pooling",
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        sem = semantics.of(self.context)
        fn = self.context.function
        softmax = sem.softmax(node, fn)
        if softmax is None:
            if syntax.is_sdpa_call(self.context, node):
                self._judge_sdpa_mask(node, sem, fn)
            return
        pipeline = sem.pipeline(softmax, fn)
        if pipeline is None:
            self._judge_pooling(node, softmax.input, sem, fn)
            return
        for use in pipeline.masks:
            shown = sem.code(use.mask)
            if use.how == "multiplied":
                self.report(
                    syntax.located(self, use.node, node),
                    f"mask {shown} is multiplied into the scores: blocked keys get score 0, "
                    "and exp(0) still gives them weight after the softmax",
                    hint=_HINT,
                    evidence=[e for e in (use.binary, use.additive) if e],
                )
            elif use.binary and not use.additive:
                self.report(
                    syntax.located(self, use.node, node),
                    f"a 0/1 mask is added to the scores ({use.binary}): adding 1 to kept keys "
                    "blocks nothing; convert it to an additive mask (0 / -inf) first",
                    hint=_HINT,
                    evidence=[use.binary],
                )

    def _judge_pooling(
        self, node: cst.Call, weights: cst.BaseExpression, sem: semantics.Semantics, fn: FunctionFacts | None
    ) -> None:
        """Attention pooling has no q·kᵀ: its scores come from a learned scorer (``Linear(d, 1)``, a
        context vector). A mask multiplied into them still leaves the blocked positions score 0 and
        weight exp(0). Followed from the softmax's input through names, shape methods and products,
        never through a sum (``s * m - 1e4 * (1 - m)`` is additive and fine)."""
        for product, mask in _multiplied_masks(weights, sem, fn):
            self.report(
                syntax.located(self, product, node),
                f"the mask `{sem.code(mask)}` is multiplied into the pooling scores before the softmax: "
                "blocked positions get score 0, and exp(0) still gives them weight",
                hint=_HINT,
            )
            return

    def _judge_sdpa_mask(self, node: cst.Call, sem: semantics.Semantics, fn: FunctionFacts | None) -> None:
        """SDPA adds a float ``attn_mask`` to the scores (only a bool one selects): a 0/1 float mask,
        such as ``torch.tril(torch.ones(t, t))``, blocks nothing."""
        args = syntax.positional(node)
        mask = args[3] if len(args) > 3 else syntax.keyword(node, "attn_mask")
        lineage = _lineage(mask, sem, fn) if mask is not None and fn is not None else []
        facts = self.context.facts
        if not any(_makes_float(n, sem) for n in lineage) or any(_selects_or_blocks(n, facts) for n in lineage):
            return  # a mask of unknown dtype (a parameter passed through) may well be bool
        info = sem.mask_info(mask, fn)
        if info is None or info[0] is None or info[1] is not None:
            return
        self.report(
            mask,
            f"a 0/1 float mask is passed as scaled_dot_product_attention's attn_mask ({info[0]}): SDPA adds a "
            "float mask to the scores, so adding 1 to kept keys blocks nothing",
            hint="pass a bool mask (True = attend): attn_mask=mask.bool()",
            evidence=[info[0]],
        )


def _lineage(mask: cst.BaseExpression, sem: semantics.Semantics, fn: FunctionFacts) -> list[cst.CSTNode]:
    """What ``mask`` is computed from in ``fn``, and through the ``self.`` attributes and registered
    buffers it reads (``self.causal[:t, :t]`` with ``register_buffer("causal", torch.tril(torch.ones(...)))``)."""
    lineage = reaching(mask, fn)
    for node in list(lineage):
        if type(node) is cst.Attribute:
            for value, writer in sem.values(node, fn):
                lineage.extend(reaching(value, writer))
    return lineage


# Methods that pass a tensor's values through (a shape or a dtype), followed back from a softmax.
_PASS_THROUGH = frozenset({"squeeze", "unsqueeze", "view", "reshape", "float", "to", "type_as", "contiguous"})


def _multiplied_masks(
    weights: cst.BaseExpression, sem: semantics.Semantics, fn: FunctionFacts | None
) -> Iterator[tuple[cst.CSTNode, cst.BaseExpression]]:
    """Each ``(scores * mask, mask)`` in the lineage of ``weights`` within ``fn``: a product
    (``*``, ``torch.mul``, ``.mul``) one of whose sides is named a mask and is not additive
    (the other side's lineage holds the mask too, once the product is rebound to its name)."""
    pending, seen = [weights], set()
    while pending:
        expr = pending.pop()
        if id(expr) in seen or len(seen) > 40:
            continue
        seen.add(id(expr))
        kind = type(expr)
        if kind is cst.Name:
            pending.extend(value for value, vfn in sem.values(expr, fn) if vfn is fn)
            continue
        sides = _product_sides(expr, sem)
        if sides is None:
            if kind is cst.Call and rp.last_name(expr.func) in _PASS_THROUGH and type(expr.func) is cst.Attribute:
                pending.append(expr.func.value)
            continue
        masks = [side for side in sides if syntax._MASK_NAME.search(sem.code(side))]
        if len(masks) == 1:
            info = sem.mask_info(masks[0], fn)
            if info is not None and info[1] is None:
                yield expr, masks[0]
                return
        pending.extend(sides)


def _product_sides(expr: cst.BaseExpression, sem: semantics.Semantics) -> tuple[cst.BaseExpression, ...] | None:
    if type(expr) is cst.BinaryOperation:
        return (expr.left, expr.right) if type(expr.operator) is cst.Multiply else None
    if type(expr) is not cst.Call:
        return None
    if sem.facts.canonical(expr.func) == "torch.mul" and len(expr.args) == 2:
        return (expr.args[0].value, expr.args[1].value)
    if type(expr.func) is cst.Attribute and expr.func.attr.value == "mul" and len(expr.args) == 1:
        return (expr.func.value, expr.args[0].value)
    return None


_FLOAT_MAKERS = frozenset({"float", "half", "double", "bfloat16", "type_as", "ones", "ones_like", "new_ones", "eye"})


def _makes_float(node: cst.CSTNode, sem: semantics.Semantics) -> bool:
    """A call that makes a float tensor: ``.float()``, ``torch.ones(...)``, ``.to(q.dtype)``."""
    if type(node) is not cst.Call:
        return False
    name = rp.last_name(node.func) or ""
    if name == "to":
        return any(word in sem.code(a.value) for a in node.args for word in ("dtype", "float", "half"))
    return name in _FLOAT_MAKERS


_BOOLEAN_OPERATORS = (cst.Equal, cst.NotEqual, cst.LessThan, cst.GreaterThan, cst.LessThanEqual, cst.GreaterThanEqual)


def _selects_or_blocks(node: cst.CSTNode, facts: FileFacts) -> bool:
    """A node that makes a mask bool (a comparison, ``~``, ``.bool()``, ``torch.bool``, a logical op)
    or additive (an infinity, a very negative number, ``finfo``): either way not a 0/1 float mask."""
    kind = type(node)
    if kind in (cst.Integer, cst.Float, cst.UnaryOperation) and (syntax.number(node) or 0) <= -1e4:
        return True
    if syntax.is_infinite(node, facts) or (kind is cst.Attribute and node.attr.value in ("finfo", "min")):
        return True
    if kind is cst.Comparison:
        return any(type(target.operator) in _BOOLEAN_OPERATORS for target in node.comparisons)
    if kind is cst.UnaryOperation:
        return type(node.operator) is cst.BitInvert
    if kind is cst.Call:
        name = (facts.canonical(node.func) or "").rsplit(".", 1)[-1] or rp.last_name(node.func) or ""
        return name in ("bool", "logical_not", "logical_and", "logical_or", "eq", "ne", "gt", "lt", "ge", "le")
    return kind is cst.Attribute and facts.canonical(node) == "torch.bool"
