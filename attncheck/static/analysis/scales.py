"""What multiplies the scores: a scale read as terms ``kind ** power``.

Part of the analyses behind ``semantics.Semantics`` (see its docstring); it never imports torch.
"""

from __future__ import annotations

import libcst as cst

from attncheck.static.analysis.patterns import method_name
from attncheck.static.analysis.results import Term
from attncheck.static.analysis.scores import ScoreQueries
from attncheck.static.analysis.syntax import number, positional
from attncheck.static.facts import FunctionFacts, self_attribute


class ScaleQueries(ScoreQueries):
    """The scale questions."""

    # -- scale terms ---------------------------------------------------------------

    def terms(
        self,
        expr: cst.BaseExpression,
        fn: FunctionFacts | None,
        power: float = 1.0,
        operands: frozenset[str] = frozenset(),
        depth: int = 0,
    ) -> list[Term]:
        """``expr`` as a product of quantities to powers: ``1/math.sqrt(d_k)`` is head_dim**-0.5."""
        if depth > 8:
            return [Term(None, power, self.code(expr))]
        found = self.quantity(expr, fn, operands)
        if found is not None:
            return [Term(found.kind, power, found.evidence)]
        value = number(expr)
        if value is not None:
            return [] if value == 1 else [Term("const", power, self.code(expr))]
        if type(expr) is cst.Name or self_attribute(expr):
            hop = self.single(expr, fn)
            if hop is not None:
                return self.terms(hop[0], hop[1], power, operands, depth + 1)
            return [Term(None, power, self.code(expr))]
        if type(expr) is cst.BinaryOperation:
            return self._binary_terms(expr, fn, power, operands, depth)
        if type(expr) is cst.Call:
            return self._call_terms(expr, fn, power, operands, depth)
        return [Term(None, power, self.code(expr))]

    def _binary_terms(
        self,
        expr: cst.BinaryOperation,
        fn: FunctionFacts | None,
        power: float,
        operands: frozenset[str],
        depth: int,
    ) -> list[Term]:
        op = expr.operator
        left = self.terms(expr.left, fn, power, operands, depth + 1)
        if type(op) is cst.Multiply:
            return left + self.terms(expr.right, fn, power, operands, depth + 1)
        if type(op) in (cst.Divide, cst.FloorDivide):
            return left + self.terms(expr.right, fn, -power, operands, depth + 1)
        if type(op) is cst.Power and number(expr.right) is not None:
            return self.terms(expr.left, fn, power * (number(expr.right) or 0.0), operands, depth + 1)
        return [Term(None, power, self.code(expr))]

    def _call_terms(
        self, call: cst.Call, fn: FunctionFacts | None, power: float, operands: frozenset[str], depth: int
    ) -> list[Term]:
        func = self.facts.canonical(call.func) or ""
        method = method_name(call)
        args = positional(call)
        short = func.rsplit(".", 1)[-1]
        if short == "sqrt" and len(args) == 1 and func != "sqrt":
            return self.terms(args[0], fn, power * 0.5, operands, depth + 1)
        if short == "rsqrt" and len(args) == 1:
            return self.terms(args[0], fn, power * -0.5, operands, depth + 1)
        if short == "pow" and len(args) == 2 and number(args[1]) is not None:
            return self.terms(args[0], fn, power * (number(args[1]) or 0.0), operands, depth + 1)
        if func in {"torch.tensor", "torch.as_tensor", "float", "int", "torch.scalar_tensor"} and args:
            return self.terms(args[0], fn, power, operands, depth + 1)
        if type(call.func) is cst.Attribute and not args:
            receiver = call.func.value
            if method == "sqrt":
                return self.terms(receiver, fn, power * 0.5, operands, depth + 1)
            if method == "rsqrt":
                return self.terms(receiver, fn, power * -0.5, operands, depth + 1)
            if method in {"float", "double", "item", "half"}:
                return self.terms(receiver, fn, power, operands, depth + 1)
        if method == "to" and type(call.func) is cst.Attribute:
            return self.terms(call.func.value, fn, power, operands, depth + 1)
        return [Term(None, power, self.code(call))]
