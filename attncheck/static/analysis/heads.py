"""Where heads are split and merged, which calls are projections, and what feeds the attention.

Part of the analyses behind ``semantics.Semantics`` (see its docstring); it never imports torch.
"""

from __future__ import annotations

from collections import deque

import libcst as cst

from attncheck.static.analysis.flow import FlowQueries
from attncheck.static.analysis.patterns import method_name
from attncheck.static.analysis.scales import ScaleQueries
from attncheck.static.analysis.syntax import (
    _ATTENTION_CALL,
    SDPA,
    _base,
    _count_axes,
    _shape_args,
    _value_parts,
    _walk_expression,
    keyword,
    number,
    positional,
    string_value,
)
from attncheck.static.facts import FunctionFacts, self_attribute


def _merge(a: tuple[bool, list[str]], b: tuple[bool, list[str]]) -> tuple[bool, list[str]]:
    return a[0] or b[0], a[1] + b[1]


def _rearrange_sides(call: cst.Call, sem: FlowQueries) -> tuple[str, str] | None:
    if not (sem.facts.canonical(call.func) or "").endswith("rearrange"):
        return None
    args = positional(call)
    if len(args) < 2:
        return None
    pattern = string_value(args[1])
    if not pattern or "->" not in pattern:
        return None
    left, right = pattern.split("->", 1)
    return left, right


def _is_split(call: cst.Call, sem: FlowQueries) -> cst.BaseExpression | None:
    method = method_name(call)
    if method in {"view", "reshape"} and type(call.func) is cst.Attribute and len(_shape_args(call)) >= 4:
        return call.func.value
    if method == "unflatten" and type(call.func) is cst.Attribute:
        return call.func.value
    sides = _rearrange_sides(call, sem)
    if sides is not None and "(" in sides[0] and _count_axes(sides[1]) > _count_axes(sides[0]):
        return positional(call)[0]
    return None


def _is_merge(call: cst.Call, sem: FlowQueries) -> cst.BaseExpression | None:
    method = method_name(call)
    if type(call.func) is not cst.Attribute and _rearrange_sides(call, sem) is None:
        return None
    if method in {"view", "reshape"} and len(_shape_args(call)) == 3:
        return call.func.value  # type: ignore[union-attr]
    if method == "flatten":
        start = positional(call)[0] if positional(call) else keyword(call, "start_dim")
        if start is not None and number(start) in (2.0, -2.0):
            return call.func.value  # type: ignore[union-attr]
    sides = _rearrange_sides(call, sem)
    if sides is not None and "(" in sides[1] and _count_axes(sides[1]) < _count_axes(sides[0]):
        return positional(call)[0]
    return None


class HeadQueries(ScaleQueries):
    """The projection, head split and merge questions."""

    # -- projections, head splits and merges ---------------------------------------

    def is_projection_call(self, call: cst.Call, fn: FunctionFacts | None) -> bool:
        """A learned linear map: a projection module, F.linear, addmm, or ``x @ self.W``."""
        attr = self_attribute(call.func)
        owner = fn.owner if fn is not None else None
        if attr is not None:
            if owner is not None and attr in owner.methods:
                return False
            return self.module_kind(owner, attr) is None or self.is_projection_module(owner, attr)
        # The Annotated Transformer's style: ``self.linears[-1](x)``, and
        # ``lin(x) for lin, x in zip(self.linears, (query, key, value))``.
        container = self_attribute(call.func.value) if type(call.func) is cst.Subscript else None
        if container is not None:
            return self._is_module_container(owner, container)
        if type(call.func) is cst.Name and fn is not None:
            return call.func.value in self._modules_iterated(fn)
        func = self.facts.canonical(call.func) or ""
        if func in {
            "torch.nn.functional.linear",
            "torch.addmm",
            "torch.nn.functional.conv1d",
            "torch.nn.functional.conv2d",
        }:
            return True
        operands = self.product_operands(call)
        return bool(operands) and any(self_attribute(_base(o)) for o in operands)

    def provenance(
        self, expr: cst.BaseExpression, fn: FunctionFacts | None, seen: set[int] | None = None
    ) -> tuple[bool, list[str]]:
        """(whether a learned projection is on some path to ``expr``, the raw inputs reached)."""
        seen = set() if seen is None else seen
        if id(expr) in seen or fn is None or len(seen) > 80:
            return False, []
        seen.add(id(expr))
        if type(expr) is cst.Name:
            raw = [expr.value] if expr.value in fn.params and expr.value != "self" else []
            projected = False
            for value, vfn in self.values(expr, fn):
                p, r = self.provenance(value, vfn, seen)
                projected, raw = projected or p, raw + r
            return projected, raw
        if type(expr) is cst.Subscript:
            return self.provenance(expr.value, fn, seen)
        if type(expr) is cst.Attribute:
            if self_attribute(expr) is not None or expr.attr.value in {"shape", "dtype", "device"}:
                return False, []
            return self.provenance(expr.value, fn, seen)
        if type(expr) is cst.BinaryOperation:
            if type(expr.operator) is cst.MatrixMultiply and (
                self_attribute(_base(expr.left)) or self_attribute(_base(expr.right))
            ):
                return True, []
            return _merge(self.provenance(expr.left, fn, seen), self.provenance(expr.right, fn, seen))
        if type(expr) in (cst.Tuple, cst.List):
            result: tuple[bool, list[str]] = (False, [])
            for element in expr.elements:
                result = _merge(result, self.provenance(element.value, fn, seen))
            return result
        if type(expr) is cst.Call:
            return self._call_provenance(expr, fn, seen)
        return False, []

    def _call_provenance(self, call: cst.Call, fn: FunctionFacts, seen: set[int]) -> tuple[bool, list[str]]:
        if self.is_projection_call(call, fn):
            return True, []
        result: tuple[bool, list[str]] = (False, [])
        if type(call.func) is cst.Attribute and self_attribute(call.func) is None:
            result = self.provenance(call.func.value, fn, seen)
            if method_name(call) not in {"matmul", "bmm", "mul", "add", "masked_fill"}:
                return result
        for arg in positional(call):
            if type(arg) in (
                cst.Name, cst.Call, cst.Subscript, cst.BinaryOperation, cst.List, cst.Tuple, cst.Attribute
            ):
                result = _merge(result, self.provenance(arg, fn, seen))
        return result

    def splits(self, fn: FunctionFacts) -> list[tuple[cst.Call, cst.BaseExpression]]:
        """Where ``fn`` splits a (b, s, d) tensor into heads: (the call, the tensor split)."""
        return self._reshapes(fn, _is_split)

    def merges(self, fn: FunctionFacts) -> list[tuple[cst.Call, cst.BaseExpression]]:
        """Where ``fn`` merges heads back into (b, s, d): (the call, the tensor merged)."""
        return self._reshapes(fn, _is_merge)

    def _reshapes(self, fn: FunctionFacts, test) -> list[tuple[cst.Call, cst.BaseExpression]]:
        found = []
        owner = fn.owner
        for call in fn.calls:
            tensor = test(call, self)
            if tensor is not None:
                found.append((call, tensor))
                continue
            attr = self_attribute(call.func)
            helper = owner.methods.get(attr) if owner is not None and attr else None
            if helper is None or helper is fn or len(helper.params) < 2:
                continue
            args = positional(call)
            param = helper.params[1]
            if args and any(type(t) is cst.Name and t.value == param for _, t in self._reshapes_here(helper, test)):
                found.append((call, args[0]))
        return found

    def _reshapes_here(self, fn: FunctionFacts, test) -> list[tuple[cst.Call, cst.BaseExpression]]:
        found = []
        for call in fn.calls:
            tensor = test(call, self)
            if tensor is not None:
                found.append((call, _base(tensor)))
        return found

    def feeds_attention(self, node: cst.CSTNode, fn: FunctionFacts) -> bool:
        """Whether the value of ``node`` (a call of ``fn``) becomes q, k or v with no learned
        projection in between: an operand of a matrix product or an argument of an attention
        function (SDPA, ``attention_interface``, ``eager_attention_forward``). Patchify and
        feature reshapes, ALiBi slopes, and states that a Linear projects afterwards
        (wav2vec2-conformer rotates hidden states before ``linear_q``) are not."""
        return id(node) in self._attention_lineage(fn)

    def _attention_lineage(self, fn: FunctionFacts) -> dict[int, cst.CSTNode]:
        """Every node the q, k and v of ``fn`` are computed from (by id), up to 4000 of them,
        walked back once per function: what a projection or a softmax reads is not q, k or v."""
        found = self._lineages.get(id(fn))
        if found is not None:
            return found
        stack: list[cst.CSTNode] = list(self._attention_inputs(fn))
        seen: dict[int, cst.CSTNode] = {}
        while stack and len(seen) < 4000:
            expr = stack.pop()
            if id(expr) in seen:
                continue
            seen[id(expr)] = expr
            if type(expr) is cst.Call and (self.is_projection_call(expr, fn) or self.softmax(expr, fn)):
                continue
            if type(expr) is cst.Name:
                stack.extend(v for v, _ in self.values(expr, fn))
            else:
                stack.extend(_value_parts(expr))
        self._lineages[id(fn)] = seen
        return seen

    def _attention_inputs(self, fn: FunctionFacts) -> list[cst.BaseExpression]:
        """q, k and v of ``fn``: the operands of the q·kᵀ products that reach a softmax, the
        other operand of a product with those weights (v), and the positional arguments of
        attention calls. A softmax over learned logits (a weighted sum of layers) is none."""
        found: list[cst.BaseExpression] = []
        weights: set[int] = set()
        for call in fn.calls:
            softmax = self.softmax(call, fn)
            pipeline = self.pipeline(softmax, fn) if softmax is not None else None
            if pipeline is not None and pipeline.products:
                found.extend(pipeline.operands)
                weights.add(id(call))
            callee = (self.facts.canonical(call.func) or "").rsplit(".", 1)[-1]
            if callee in SDPA or _ATTENTION_CALL.search(callee):
                found.extend(positional(call))
        if weights:
            for node in _walk_expression(fn.node.body):
                operands = self.product_operands(node)
                if operands is not None and len(operands) == 2:
                    first, second = operands
                    if self._computed_from(first, weights, fn):
                        found.append(second)
                    elif self._computed_from(second, weights, fn):
                        found.append(first)
        return found

    def _computed_from(self, expr: cst.BaseExpression, targets: set[int], fn: FunctionFacts) -> bool:
        """Whether one of the nodes ``targets`` is in the near lineage of ``expr``."""
        queue, seen = deque([expr]), {id(expr)}
        while queue and len(seen) < 200:
            current = queue.popleft()
            if id(current) in targets:
                return True
            parts = [v for v, _ in self.values(current, fn)] if type(current) is cst.Name else _value_parts(current)
            for part in parts:
                if id(part) not in seen:
                    seen.add(id(part))
                    queue.append(part)
        return False

    def reaches_attention(self, expr: cst.BaseExpression, fn: FunctionFacts) -> bool:
        return self.reaches_product(expr, fn) or any(
            (self.facts.canonical(c.func) or "") in SDPA for c in fn.calls
        )
