"""ATT305 causal-diagonal: a causal mask built with the wrong diagonal or alignment."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import libcst as cst

from attncheck.findings import Severity
from attncheck.static.analysis import semantics, syntax
from attncheck.static.analysis.flow import reaching
from attncheck.static.analysis.patterns import (
    FillSite,
    argument,
    fill_site,
    is_blocking_value,
    literal_is,
    literal_value,
    method_name,
    receiver,
    selected_polarity,
    tracer,
)
from attncheck.static.context import FileContext
from attncheck.static.facts import FileFacts, FunctionFacts, self_attribute, whole_number
from attncheck.static.rule import Invalid, Rule
from attncheck.static.tree import subtree

_SDPA = "torch.nn.functional.scaled_dot_product_attention"
_KV_CACHE = re.compile(
    r"past_key_values?|layer_past|kv_cache|use_cache|\bpast\b|cache_position", re.IGNORECASE
)
_ADDITIVE = re.compile(r"inf|finfo|\.min\b|-1e\d|-10000")
_TRIANGLE_NAMES = frozenset({"triu", "tril", "triu_", "tril_"})


@dataclass(frozen=True)
class _Triangle:
    """A ``triu``/``tril`` call as used: which side it selects, and what the use makes of it."""

    call: cst.Call
    upper: bool
    diagonal: int
    source: cst.BaseExpression  # the matrix the triangle is taken of
    flipped: bool  # the use selects the positions the triangle zeroes


class CausalDiagonal(Rule):
    code = "ATT305"
    PREFILTER = ("triu", "tril", "is_causal")
    VALID = (
        "def f(s, T):\n    m = torch.triu(torch.ones(T, T), diagonal=1).bool()\n"
        "    return s.masked_fill(m, float('-inf'))",
        "def f(s, T):\n    m = torch.tril(torch.ones(T, T))\n    return s.masked_fill(m == 0, -1e4)",
        "class A:\n    def __init__(self, n):\n"
        "        self.register_buffer('bias', torch.tril(torch.ones(n, n)).view(1, 1, n, n))\n"
        "    def forward(self, att, T):\n        return att.masked_fill(self.bias[:, :, :T, :T] == 0, -1e4)",
        "def f(s, T):\n    m = torch.full((T, T), torch.finfo(s.dtype).min).triu(1)\n    return s + m",
        "def f(q, k, v, T):\n    keep = torch.ones(T, T, dtype=torch.bool).tril()\n"
        "    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)",
        "def f(q, k, v):\n    return F.scaled_dot_product_attention(q, k, v, is_causal=True)",
        # Bottom-right elsewhere, and is_causal only where the lengths agree.
        "def f(q, k, v, flash):\n    n, m = q.size(-2), k.size(-2)\n    if flash:\n"
        "        return F.scaled_dot_product_attention(q, k, v, is_causal=n == m)\n"
        "    keep = torch.tril(torch.ones(n, m, dtype=torch.bool), diagonal=m - n)\n"
        "    return (q @ k.mT / math.sqrt(q.size(-1))).masked_fill(~keep, -1e4).softmax(-1) @ v",
        # PP-DocLayout's reading-order pointer head: each element points to a later one, no softmax.
        "def f(self, queries, keys, n):\n    logits = (queries @ keys.transpose(-2, -1)) / (self.head_size**0.5)\n"
        "    mask = torch.tril(torch.ones(n, n, device=logits.device)).bool()\n"
        "    return logits.masked_fill(mask.unsqueeze(0), -1e4)",
    )
    INVALID = (
        Invalid(
            "def f(q, k, v, flash):\n    n, m = q.size(-2), k.size(-2)\n    if flash:\n"
            "        return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
            "    keep = torch.tril(torch.ones(n, m, dtype=torch.bool), diagonal=m - n)\n"
            "    return (q @ k.mT / math.sqrt(q.size(-1))).masked_fill(~keep, -1e4).softmax(-1) @ v",
            line=4,
            message="bottom-right elsewhere",
        ),
        Invalid(
            "def f(s, T):\n    m = torch.triu(torch.ones(T, T)).bool()\n    return s.masked_fill(m, -1e4)",
            line=2,
            message="itself",
        ),
        Invalid(
            "def f(s, T):\n    m = torch.tril(torch.ones(T, T), diagonal=1)\n"
            "    return s.masked_fill(m == 0, -1e4)",
            line=2,
            message="next",
        ),
        Invalid(
            "def f(s, T):\n    m = torch.tril(torch.ones(T, T)).bool()\n    return s.masked_fill(m, -1e4)",
            line=2,
            message="inverted",
        ),
        Invalid(
            "def f(s, T):\n    m = torch.full((T, T), float('-inf')).triu()\n    s += m\n    return s", line=2
        ),
        Invalid(
            "def f(q, k, v, past_key_value=None):\n"
            "    return F.scaled_dot_product_attention(q, k, v, is_causal=True)",
            line=2,
            message="top-left",
            severity=Severity.WARNING,
        ),
        Invalid(  # a keep triangle given to nn.MultiheadAttention, whose bool attn_mask is True where blocked
            "import torch, torch.nn as nn\nclass B(nn.Module):\n    def __init__(self, d, h):\n"
            "        super().__init__()\n        self.attn = nn.MultiheadAttention(d, h, batch_first=True)\n"
            "    def forward(self, x, t):\n        causal = torch.tril(torch.ones(t, t, dtype=torch.bool))\n"
            "        return self.attn(x, x, x, attn_mask=causal)[0]",
            line=7,
            message="wrong triangle",
        ),
        Invalid(  # the keys extended by a cache of any name
            "def f(q, k, v, pk):\n    k = torch.cat([pk, k], dim=2)\n"
            "    return F.scaled_dot_product_attention(q, k, v, is_causal=True)",
            line=3,
            message="top-left",
            severity=Severity.WARNING,
        ),
        Invalid(
            "def f(s, q_len, kv_len, past_key_values):\n    m = torch.tril(torch.ones(q_len, kv_len))\n"
            "    return s.masked_fill(m == 0, -1e4)",
            line=2,
            severity=Severity.WARNING,
        ),
        Invalid(
            "def f(q, k, T):\n    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))\n"
            "    m = torch.tril(torch.ones(T, T)).bool()\n    return F.softmax(s.masked_fill(m, -1e4), dim=-1)",
            line=3,
            message="inverted",
        ),
    )

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self.tracer = tracer(context)
        self.reported: set[int] = set()
        # A triangle is a call whose callee, or the import that aliases it, says triu or tril:
        # in most files (those that only say is_causal) no mask can be traced back to one.
        self.triangles = "triu" in context.source.text or "tril" in context.source.text

    def get_visitors(self) -> Mapping[str, cst.BatchableCSTVisitor]:
        """Without a triangle only SDPA's ``is_causal`` is judged: no sum is visited."""
        visitors = super().get_visitors()
        return visitors if self.triangles else {"visit_Call": visitors["visit_Call"]}

    def visit_Call(self, node: cst.Call) -> None:
        facts = self.context.facts
        if self.triangles:
            site = fill_site(node, facts)
            if site is not None and is_blocking_value(site.value, facts):
                fn = self.context.function
                if not self._scoring_head(site, fn):
                    self._check(site.mask, blocked=site.mask_blocks, fn=fn)
                return
        if self.triangles and self._is_multihead_attention(node):
            # nn.MultiheadAttention's attn_mask: a bool mask is True where blocked, a float one is added
            mask = argument(node, 5, "attn_mask")
            if mask is not None:
                self._check(mask, blocked=True, fn=self.context.function)
            return
        if not syntax.is_sdpa_call(self.context, node) or facts.canonical(node.func) != _SDPA:
            return
        fn = self.context.function
        mask = argument(node, 3, "attn_mask") if self.triangles else None
        if mask is not None:
            code = self.context.module.code_for_node(self.tracer.origin(mask, fn)[0])
            self._check(mask, blocked=bool(_ADDITIVE.search(code)), fn=fn)
        causal = argument(node, 5, "is_causal")
        aligned = self._bottom_right_elsewhere(fn) if _unconditional(causal) else None
        if aligned is not None:
            shown = self.context.module.code_for_node(aligned)
            self.report(
                node,
                f"is_causal aligns the causal mask top-left, but this {'class' if fn and fn.owner else 'function'} "
                f"aligns it bottom-right elsewhere (`{shown}`): whenever the keys outnumber the queries "
                "the two paths disagree, and this one hides keys the queries should see",
                hint="pass the bottom-right mask built elsewhere as attn_mask, or is_causal only when "
                "q_len == k_len",
                evidence=[f"bottom-right: {shown}", f"top-left: {self.context.module.code_for_node(causal)}"],
            )
            return
        if isinstance(causal, cst.Name) and causal.value == "True" and (
            self._has_kv_cache(fn) or _keys_extended(argument(node, 1, "key"), fn, facts)
        ):
            self.report(
                node,
                "is_causal=True in a forward that also takes a KV cache: SDPA aligns the causal mask "
                "top-left, so with cached keys the new query sees only the first key(s)",
                severity=Severity.WARNING,
                hint="when keys outnumber queries pass an explicit bottom-right mask "
                "(tril(ones(q_len, k_len), diagonal=k_len - q_len)) or is_causal=q_len > 1 and no cache",
            )

    def _is_multihead_attention(self, node: cst.Call) -> bool:
        """``self.attn(q, k, v, ...)`` where ``self.attn = nn.MultiheadAttention(...)``."""
        fn = self.context.function
        attr = self_attribute(node.func)
        owner = fn.owner if fn is not None else None
        return (
            attr is not None
            and owner is not None
            and owner.constructed_as(attr, self.context.facts) == "torch.nn.MultiheadAttention"
        )

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.operator, cst.AddAssign):
            self._check(node.value, blocked=True, fn=self.context.function, additive=True)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.Add):
            for side in (node.left, node.right):
                self._check(side, blocked=True, fn=self.context.function, additive=True)

    def _check(
        self, mask: cst.BaseExpression, *, blocked: bool, fn: FunctionFacts | None, additive: bool = False
    ) -> None:
        triangle = self._trace(mask, fn)
        if triangle is None or id(triangle.call) in self.reported:
            return
        source_text = self.context.module.code_for_node(triangle.source)
        if additive and not _ADDITIVE.search(source_text):
            return  # a 0/1 triangle added to scores is ATT301's business
        blocks = blocked != triangle.flipped
        problem = _diagonal_problem(triangle, blocks)
        self.reported.add(id(triangle.call))
        shown = self.context.module.code_for_node(triangle.call)
        if problem is not None:
            role = "blocked" if blocks else "kept"
            self.report(
                triangle.call,
                f"`{shown}` selects the {role} positions of a causal mask but {problem}",
                hint="blocked = torch.triu(ones(T, T), diagonal=1).bool(); "
                "kept = torch.tril(ones(T, T)) with masked_fill(kept == 0, ...)",
                evidence=[
                    f"triangle: {'triu' if triangle.upper else 'tril'}, diagonal={triangle.diagonal}",
                    f"used as: {role}",
                ],
            )
        elif _rectangular(triangle.source) and self._has_kv_cache(fn):
            self.report(
                triangle.call,
                f"`{shown}` is a top-left aligned causal mask over a rectangular (queries, keys) "
                "matrix in a forward with a KV cache: the new queries should be aligned bottom-right",
                severity=Severity.WARNING,
                hint="offset the diagonal by k_len - q_len: "
                "torch.tril(ones(q_len, k_len), diagonal=k_len - q_len)",
            )

    def _trace(self, mask: cst.BaseExpression, fn: FunctionFacts | None) -> _Triangle | None:
        """Follow a mask expression back to the ``triu``/``tril`` that built it."""
        flipped = False
        node: cst.BaseExpression = mask
        for _ in range(10):
            if (
                isinstance(node, cst.BinaryOperation)
                and isinstance(node.operator, cst.Subtract)
                and literal_is(node.left, 1)
            ):
                node, flipped = node.right, not flipped
                continue
            found = selected_polarity(node)
            if found is None:
                return None
            node, polarity = found
            flipped ^= polarity == "zeros"
            triangle = self._triangle(node, flipped)
            if triangle is not None:
                return triangle
            stepped = self.tracer.step(node, fn)
            if stepped is None:
                return None
            node, fn = stepped
        return None

    def _triangle(self, node: cst.BaseExpression, flipped: bool) -> _Triangle | None:
        if not isinstance(node, cst.Call):
            return None
        canonical = self.context.facts.canonical(node.func) or ""
        if canonical in ("torch.triu", "torch.tril") and node.args:
            upper, source, diagonal = (
                canonical.endswith("triu"),
                node.args[0].value,
                argument(node, 1, "diagonal"),
            )
        elif method_name(node) in ("triu", "tril", "triu_", "tril_") and not canonical.startswith("torch."):
            upper, source, diagonal = (
                method_name(node).startswith("triu"),
                receiver(node),
                argument(node, 0, "diagonal"),
            )
        else:
            return None
        value = 0 if diagonal is None else whole_number(literal_value(diagonal, self.context.facts))
        if value is None:
            return None  # an offset diagonal: deliberate alignment
        return _Triangle(node, upper, value, source, flipped)

    def _scoring_head(self, site: FillSite, fn: FunctionFacts | None) -> bool:
        """A q·kᵀ product masked here and never softmaxed here: a pointer or matching head
        (PP-DocLayout's reading order keeps ``j > i`` on purpose), not causal attention."""
        return (
            site.target is not None
            and semantics.of(self.context).reaches_product(site.target, fn)
            and not self.tracer.feeds_attention(site, fn)
        )

    def _bottom_right_elsewhere(self, fn: FunctionFacts | None) -> cst.Call | None:
        """A triangle in ``fn``'s class (or in ``fn`` itself, outside a class) whose diagonal is
        offset by a difference of lengths (``tril(ones(q_len, k_len), diagonal=k_len - q_len)``):
        the code knows the queries may be fewer than the keys, and aligns them bottom-right."""
        if fn is None or not self.triangles:
            return None
        scopes = list(fn.owner.methods.values()) if fn.owner is not None else [fn]
        for scope in scopes:
            for call in scope.calls:
                if self._offset_by_difference(call, scope):
                    return call
        return None

    def _offset_by_difference(self, call: cst.Call, fn: FunctionFacts) -> bool:
        canonical = self.context.facts.canonical(call.func) or ""
        if canonical in ("torch.triu", "torch.tril"):
            diagonal = argument(call, 1, "diagonal")
        elif method_name(call) in _TRIANGLE_NAMES and not canonical.startswith("torch."):
            diagonal = argument(call, 0, "diagonal")
        else:
            return False
        if type(diagonal) is cst.Name:
            diagonal = self.tracer.origin(diagonal, fn, through=frozenset())[0]
        return diagonal is not None and any(
            type(n) is cst.BinaryOperation and type(n.operator) is cst.Subtract for n in subtree.preorder(diagonal)
        )

    def _has_kv_cache(self, fn: FunctionFacts | None) -> bool:
        return fn is not None and bool(_KV_CACHE.search(self.context.module.code_for_node(fn.node)))


def _unconditional(causal: cst.BaseExpression | None) -> bool:
    """``is_causal=True`` or a flag (``self.is_causal``, ``causal``): not a comparison of lengths
    (``q_len == k_len``, ``q_len > 1``), which chooses top-left only where it is right."""
    return causal is not None and (
        type(causal) is cst.Name or (type(causal) is cst.Attribute and type(causal.value) is cst.Name)
    ) and not (type(causal) is cst.Name and causal.value in ("False", "None"))


def _diagonal_problem(triangle: _Triangle, blocks: bool) -> str | None:
    """What is wrong with this triangle in this role, or None for the causal one."""
    k = triangle.diagonal
    if blocks != triangle.upper:
        return (
            "is the wrong triangle: the mask is inverted, each token sees the future and not the past "
            f"({'triu' if triangle.upper else 'tril'} where "
            f"{'tril' if triangle.upper else 'triu'} is meant)"
        )
    wanted = 1 if blocks else 0
    if k == wanted:
        return None
    if k < wanted:
        return (
            f"diagonal={k} also blocks the diagonal: a token cannot see itself and row 0 has no visible key"
        )
    return f"diagonal={k} lets each token see the next {abs(k - wanted)} token(s) (a future leak)"


def _rectangular(source: cst.BaseExpression) -> bool:
    """``ones(q_len, k_len)``: a triangle of a matrix whose two sizes are spelled differently."""
    if not isinstance(source, cst.Call):
        return False
    sizes = [a.value for a in source.args if a.keyword is None]
    if len(sizes) == 1 and isinstance(sizes[0], (cst.Tuple, cst.List)):
        sizes = [e.value for e in sizes[0].elements]
    if len(sizes) != 2:
        return False
    left, right = (cst.Module([]).code_for_node(s) for s in sizes)
    return left != right


_CONCATENATIONS = frozenset({"torch.cat", "torch.concat", "torch.concatenate"})


def _keys_extended(key: cst.BaseExpression | None, fn: FunctionFacts | None, facts: FileFacts) -> bool:
    """The keys given to SDPA were concatenated after something (``k = torch.cat([past_k, k], dim=2)``,
    whatever the cache is called): there may be more keys than queries."""
    if type(key) is not cst.Name or fn is None:
        return False
    for node in reaching(key, fn):
        if type(node) is cst.Call and facts.canonical(node.func) in _CONCATENATIONS and node.args:
            pieces = node.args[0].value
            if type(pieces) in (cst.List, cst.Tuple) and len(pieces.elements) >= 2:
                last = pieces.elements[-1].value
                if type(last) is cst.Name and last.value == key.value:
                    return True
    return False
