"""Where q·kᵀ and its softmax are, and the pipeline between them: products, operands, factors, masks.

Part of the analyses behind ``semantics.Semantics`` (see its docstring); it never imports torch.
"""

from __future__ import annotations

from collections import deque

import libcst as cst

from attncheck.static.analysis.flow import FlowQueries
from attncheck.static.analysis.masks import MaskQueries
from attncheck.static.analysis.patterns import method_name, other_method, product_operands, softmax_call
from attncheck.static.analysis.results import Factor, MaskUse, Pipeline, Softmax
from attncheck.static.analysis.syntax import (
    _MASK_NAME,
    _SOFTMAX,
    _is_big_literal,
    _walk_expression,
    is_infinite,
    keyword,
    number,
    positional,
)
from attncheck.static.facts import FunctionFacts, self_attribute

_TANH = frozenset({"torch.tanh", "torch.nn.functional.tanh"})


def _is_tf_style_mask_term(other: cst.BaseExpression, sem: FlowQueries) -> bool:
    """``- 1e4 * (1 - mask)``: the additive half of the old TF multiplicative idiom."""
    code = sem.module.code_for_node(other)
    nodes = list(_walk_expression(other))
    complement = any(  # ``(1 - b)``: GPT-1's ``w * b + -1e4 * (1 - b)`` names its mask ``b``
        type(n) is cst.BinaryOperation and type(n.operator) is cst.Subtract and number(n.left) == 1
        for n in nodes
    )
    return (
        (bool(_MASK_NAME.search(code)) or complement)
        and any(
            _is_big_literal(n) or is_infinite(n, sem.facts)  # type: ignore[arg-type]
            for n in nodes
        )
        and "(" in code
    )


class ScoreQueries(MaskQueries):
    """The q·kᵀ, softmax and pipeline questions."""

    # -- softmax ---------------------------------------------------------------

    def softmax(self, call: cst.Call, fn: FunctionFacts | None) -> Softmax | None:
        """``patterns.softmax_call``, memoised: several rules ask about every call of a file, so each
        call is read once per function, but the commonest non-softmaxes are told apart before that
        memo: a method other than ``softmax`` of anything but ``self``, and a plain name other
        than a softmax's."""
        callee = call.func
        if other_method(callee, "softmax"):
            return None
        if type(callee) is cst.Name and self.facts.canonical(callee) not in _SOFTMAX:
            return None
        key = (id(call), id(fn))
        known = self._softmaxes.get(key)
        if known is not None and known[0] is call:
            return known[1]
        found = softmax_call(call, self.facts, fn)
        self._softmaxes[key] = (call, found)
        return found

    # -- products q·kᵀ ---------------------------------------------------------

    def reaches_product(self, expr: cst.BaseExpression, fn: FunctionFacts | None, depth: int = 0) -> bool:
        """Whether the lineage of ``expr`` contains a q·kᵀ product."""
        key = id(expr)
        if key in self._reaches:
            return self._reaches[key]
        self._reaches[key] = False  # cycles end here
        found = depth < 12 and self._children_reach(expr, fn, depth)
        self._reaches[key] = found
        return found

    def _children_reach(self, expr: cst.BaseExpression, fn: FunctionFacts | None, depth: int) -> bool:
        """Whether ``expr`` is a product or one of its parts reaches one, in order, stopping at
        the first that does (what the memo of ``reaches_product`` records depends on it)."""
        if product_operands(expr, self.facts) is not None:
            return True
        deeper, kind = depth + 1, type(expr)  # exact classes: isinstance on libcst's is slow
        if kind is cst.Name:
            return any(self.reaches_product(value, vfn, deeper) for value, vfn in self.values(expr, fn))
        if kind is cst.BinaryOperation:
            return self.reaches_product(expr.left, fn, deeper) or self.reaches_product(expr.right, fn, deeper)
        if kind is cst.Subscript:
            return self.reaches_product(expr.value, fn, deeper)
        if kind is cst.Call and self.softmax(expr, fn) is None:
            if (
                type(expr.func) is cst.Attribute
                and not self_attribute(expr.func)
                and self.reaches_product(expr.func.value, fn, deeper)
            ):
                return True
            return any(self.reaches_product(arg.value, fn, deeper) for arg in expr.args)
        return False

    # -- the pipeline from products to a softmax ----------------------------------

    def pipeline(self, softmax: Softmax, fn: FunctionFacts | None) -> Pipeline | None:
        """The scores feeding ``softmax``, or None when its input is not built from q·kᵀ here."""
        key = id(softmax.call)
        if key not in self._pipelines:
            result = None
            if fn is not None and self.reaches_product(softmax.input, fn):
                result = Pipeline(softmax, fn)
                self._walk_scores(softmax.input, fn, result, set())
            self._pipelines[key] = result
        return self._pipelines[key]

    def dual_softmax(self, softmax: Softmax, fn: FunctionFacts | None) -> bool:
        """The same scores normalised over another dim and the two multiplied: the dual-softmax
        of feature matching (LoFTR: ``softmax(sim, 1) * softmax(sim, 2)``), where both are meant
        and the similarity is not attention."""
        if fn is None or softmax.dim is None:
            return False
        product = self._multiplied(fn).get(id(softmax.call))
        if product is None:
            return False
        other = product.right if product.left is softmax.call else product.left
        found = self.softmax(other, fn) if type(other) is cst.Call else None
        return (
            found is not None
            and found.dim is not None
            and self.code(found.input) == self.code(softmax.input)
            and self.code(found.dim) != self.code(softmax.dim)
        )

    def _multiplied(self, fn: FunctionFacts) -> dict[int, cst.BinaryOperation]:
        """Each node of ``fn``'s body that is a side of an ``a * b``, by id, with that product:
        a parsed node has one parent, so one product at most. Built once per function."""
        found = self._multiplications_in.get(id(fn))
        if found is None:
            found = {}
            preorder = fn.preorder
            for node in preorder.nodes[preorder.where[id(fn.node.body)]:]:  # the body: the last child
                if type(node) is cst.BinaryOperation and type(node.operator) is cst.Multiply:
                    found[id(node.left)] = found[id(node.right)] = node
            self._multiplications_in[id(fn)] = found
        return found

    def _walk_scores(
        self, expr: cst.BaseExpression, fn: FunctionFacts, out: Pipeline, seen: set[int]
    ) -> None:
        if id(expr) in seen:
            return
        seen.add(id(expr))
        operands = product_operands(expr, self.facts)
        if operands is not None:
            if not self._additive(operands, fn):
                self._record_product(expr, operands, fn, out)
            return
        if type(expr) is cst.Name:
            for value, vfn in self.values(expr, fn):
                if vfn is not None and not self._after_and_from(value, vfn, out.softmax.call, fn):
                    self._walk_scores(value, vfn, out, seen)
        elif type(expr) is cst.Subscript:
            self._walk_scores(expr.value, fn, out, seen)
        elif type(expr) is cst.BinaryOperation:
            self._walk_binary(expr, fn, out, seen)
        elif type(expr) is cst.Call:
            self._walk_call(expr, fn, out, seen)

    def _additive(self, operands: list[cst.BaseExpression], fn: FunctionFacts) -> bool:
        """Additive (Bahdanau) attention: one operand is a tanh (``tanh(W x) @ v``, scores v · tanh(W q +
        U k)). Its scores are no q·kᵀ, and no 1/sqrt(d) convention applies to them."""
        for operand in operands:
            values = [operand, *(v for v, _ in self.values(operand, fn))] if type(operand) is cst.Name else [operand]
            if any(type(v) is cst.Call and (self.facts.canonical(v.func) in _TANH or method_name(v) == "tanh")
                   for v in values):
                return True
        return False

    def _after_and_from(
        self, value: cst.BaseExpression, vfn: FunctionFacts, softmax: cst.Call, fn: FunctionFacts
    ) -> bool:
        """``value`` is written after ``softmax`` and computed from its result."""
        if vfn is not fn:
            return False
        layout = self._layout(fn)
        after = layout.position(value, -1) > layout.position(softmax, len(layout.where))
        return after and self._consumes(value, vfn, softmax)

    def _consumes(self, expr: cst.BaseExpression, fn: FunctionFacts | None, target: cst.Call) -> bool:
        """Whether ``expr`` is computed from ``target``'s result. A name rebound after the
        softmax (``attn = attn.softmax(-1); attn = attn[:, 0] - lam * attn[:, 1]``) holds that
        later value too, in this flow-insensitive view; it is not what the softmax reads.
        Breadth first, so the nearest values are looked at before long lineages."""
        queue, seen = deque([(expr, fn)]), {id(expr)}
        while queue and len(seen) < 400:
            current, where = queue.popleft()
            nodes = list(_walk_expression(current))
            local = {  # ``for lin, x in ...`` binds names of its own, not the function's
                n.value for c in nodes if type(c) is cst.CompFor
                for n in _walk_expression(c.target) if type(n) is cst.Name
            }
            for node in nodes:
                if node is target:
                    return True
                if type(node) is cst.Name and node.value not in local:
                    for value, vfn in self.values(node, where):
                        if id(value) not in seen:
                            seen.add(id(value))
                            queue.append((value, vfn))
        return False

    def _walk_binary(
        self, expr: cst.BinaryOperation, fn: FunctionFacts, out: Pipeline, seen: set[int]
    ) -> None:
        left = self.reaches_product(expr.left, fn)
        right = self.reaches_product(expr.right, fn)
        if left and right and type(expr.operator) in (cst.Multiply, cst.Divide):
            # ``q @ k * q.size(-1) ** -0.5``: a Python scalar is a factor, never the scores, even
            # when its tensor's name is rebound to an attention output later in the function.
            left, right = not self.is_scalar(expr.left, fn), not self.is_scalar(expr.right, fn)
        if left == right:
            if left and type(expr.operator) in (cst.Add, cst.Subtract):
                self._walk_terms(expr, lambda side: self._walk_scores(side, fn, out, seen), out)
            elif left:
                self._walk_scores(expr.left, fn, out, seen)
                self._walk_scores(expr.right, fn, out, seen)
            return
        scores, other = (expr.left, expr.right) if left else (expr.right, expr.left)
        op = expr.operator
        if type(op) in (cst.Multiply, cst.Divide):
            self._other_factor(expr, other, type(op) is cst.Divide and other is expr.right, fn, out)
        elif type(op) in (cst.Add, cst.Subtract) and not _is_tf_style_mask_term(other, self):
            self._other_term(expr, other, fn, out)
        elif type(op) in (cst.Add, cst.Subtract):
            self._walk_tf_style(scores, fn, out, seen)  # ``scores * mask - 1e4 * (1 - mask)`` is fine
            return
        self._walk_scores(scores, fn, out, seen)

    @staticmethod
    def _walk_terms(expr: cst.BinaryOperation, walk_side, out: Pipeline) -> None:
        """Walk both terms of a sum, keeping the scale factors of one: in ``q * s + b * s``
        (Funnel's ``q_head + r_w_bias``, both scaled) or ``c2p / s + p2c / s`` each term
        carries the scale of the whole sum, which is applied once, not twice."""
        start = len(out.factors)
        walk_side(expr.left)
        middle = len(out.factors)
        walk_side(expr.right)
        if middle > start:
            del out.factors[middle:]

    def _walk_tf_style(
        self, scores: cst.BaseExpression, fn: FunctionFacts, out: Pipeline, seen: set[int]
    ) -> None:
        if type(scores) is cst.BinaryOperation:
            for side in (scores.left, scores.right):
                if self.reaches_product(side, fn):
                    self._walk_scores(side, fn, out, seen)

    def _walk_call(self, call: cst.Call, fn: FunctionFacts, out: Pipeline, seen: set[int]) -> None:
        if keyword(call, "scale", "scaling", "softmax_scale", "sm_scale") is not None:
            out.scale_argument = True
        method = method_name(call)
        func = self.facts.canonical(call.func) or ""
        args = positional(call)
        receiver = call.func.value if type(call.func) is cst.Attribute else None
        if (
            method in {"mul", "mul_", "multiply", "div", "div_", "divide", "true_divide"}
            and args
            and receiver is not None
            and not func.startswith("torch.")
        ):
            self._other_factor(call, args[0], method.startswith(("div", "true")), fn, out)
            self._walk_scores(receiver, fn, out, seen)
            return
        if (
            func in {"torch.mul", "torch.div", "torch.multiply", "torch.divide", "torch.true_divide"}
            and len(args) == 2
        ):
            left = self.reaches_product(args[0], fn)
            scores, other = (args[0], args[1]) if left else (args[1], args[0])
            self._other_factor(call, other, "div" in func and other is args[1], fn, out)
            self._walk_scores(scores, fn, out, seen)
            return
        if func == "torch.add" and len(args) == 2:
            left = self.reaches_product(args[0], fn)
            scores, other = (args[0], args[1]) if left else (args[1], args[0])
            self._other_term(call, other, fn, out)
            self._walk_scores(scores, fn, out, seen)
            return
        if receiver is not None and not self_attribute(call.func) and self.reaches_product(receiver, fn):
            self._walk_scores(receiver, fn, out, seen)
        for arg in call.args:
            if self.reaches_product(arg.value, fn):
                self._walk_scores(arg.value, fn, out, seen)

    def _record_product(
        self, node: cst.CSTNode, operands: list[cst.BaseExpression], fn: FunctionFacts, out: Pipeline
    ) -> None:
        out.products.append(node)
        out.operands.extend(operands)
        rank = self.rank(node, fn) if type(node) is cst.Call else None
        ranks = [rank] if rank is not None else [self.rank(o, fn) for o in operands]
        out.ranks.extend(r for r in ranks if r is not None)
        if type(node) is cst.Call:
            alpha = keyword(node, "alpha")
            if alpha is not None and (self.facts.canonical(node.func) or "").endswith("baddbmm"):
                out.factors.append(Factor(alpha, alpha, False, fn))
        # A factor on q reached again through a second product (``q @ k + q @ rel``: VITS,
        # Nyströmformer) scales their sum once. Within one product it may count twice: a
        # scaled tensor that is both q and k (``q @ q.T``) is scaled on both sides.
        before = {id(f.node) for f in out.factors}
        start = len(out.factors)
        for operand in operands:
            self._walk_operand(operand, fn, out, set())
        out.factors[start:] = [f for f in out.factors[start:] if id(f.node) not in before]

    def operand_factors(self, expr: cst.BaseExpression, fn: FunctionFacts) -> bool:
        """Whether a scale factor (or a ``scale=`` argument) is applied to ``expr``'s lineage:
        what a caller passes as q or k to a helper that computes the scores."""
        factors, scale_argument = self.factors_on(expr, fn)
        return bool(factors) or scale_argument

    def factors_on(self, expr: cst.BaseExpression, fn: FunctionFacts) -> tuple[list[Factor], bool]:
        """The scale factors applied to ``expr``'s lineage (``q = q * self.scale``), and whether a
        ``scale=`` argument is among them: what q carries into a fused kernel that scales again."""
        scratch = Pipeline(Softmax(cst.Call(cst.Name("softmax")), expr, None, False, lambda: ""), fn)
        self._walk_operand(expr, fn, scratch, set())
        return scratch.factors, scratch.scale_argument

    def _walk_operand(
        self, expr: cst.BaseExpression, fn: FunctionFacts | None, out: Pipeline, seen: set[int]
    ) -> None:
        """Collect scale factors applied to q or k before the product (``q = q * self.scale``)."""
        if id(expr) in seen or fn is None or len(seen) > 60:
            return
        seen.add(id(expr))
        if type(expr) is cst.Name:
            for value, vfn in self.values(expr, fn):
                self._walk_operand(value, vfn, out, seen)
        elif type(expr) is cst.Subscript:
            self._walk_operand(expr.value, fn, out, seen)
        elif type(expr) is cst.BinaryOperation and type(expr.operator) in (cst.Multiply, cst.Divide):
            if self.is_scalar(expr.right, fn):
                out.factors.append(Factor(expr, expr.right, type(expr.operator) is cst.Divide, fn))
                self._walk_operand(expr.left, fn, out, seen)
            elif type(expr.operator) is cst.Multiply and self.is_scalar(expr.left, fn):
                out.factors.append(Factor(expr, expr.left, False, fn))
                self._walk_operand(expr.right, fn, out, seen)
        elif type(expr) is cst.BinaryOperation and type(expr.operator) in (cst.Add, cst.Subtract):
            self._walk_terms(expr, lambda side: self._walk_operand(side, fn, out, seen), out)
        elif type(expr) is cst.Call:
            self._walk_operand_call(expr, fn, out, seen)

    def _walk_operand_call(self, call: cst.Call, fn: FunctionFacts, out: Pipeline, seen: set[int]) -> None:
        if keyword(call, "scale", "scaling", "softmax_scale") is not None:
            out.scale_argument = True
        if self_attribute(call.func) is not None and self.module_kind(
            fn.owner, self_attribute(call.func) or ""
        ):
            return  # a projection: what came before it is not q or k
        method = method_name(call)
        args = positional(call)
        if method in {"mul", "mul_", "div", "div_", "divide"} and args and self.is_scalar(args[0], fn):
            out.factors.append(Factor(call, args[0], method.startswith("div"), fn))
        if type(call.func) is cst.Attribute and not self_attribute(call.func):
            self._walk_operand(call.func.value, fn, out, seen)
            return  # a method's arguments (view sizes, dims) are not q or k
        for index, arg in enumerate(args):
            # the tensor a helper reshapes may be scaled in place: ``self._shape(q_proj(x) * s, ...)``
            if type(arg) in (cst.Name, cst.Call, cst.Subscript) or (
                index == 0 and type(arg) is cst.BinaryOperation
            ):
                self._walk_operand(arg, fn, out, seen)

    def _other_factor(
        self, node: cst.CSTNode, other: cst.BaseExpression, divides: bool, fn: FunctionFacts, out: Pipeline
    ) -> None:
        mask = self.mask_info(other, fn)
        if mask is not None:
            out.masks.append(MaskUse(node, other, "multiplied", *mask))
        else:
            out.factors.append(Factor(node, other, divides, fn))

    def _other_term(
        self, node: cst.CSTNode, other: cst.BaseExpression, fn: FunctionFacts, out: Pipeline
    ) -> None:
        mask = self.mask_info(other, fn)
        if mask is not None:
            out.masks.append(MaskUse(node, other, "added", *mask))
