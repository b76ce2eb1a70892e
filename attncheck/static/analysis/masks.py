"""What a mask added or multiplied into the scores is: its lineage, and the evidence that it is 0/1 or additive.

Part of the analyses behind ``semantics.Semantics`` (see its docstring); it never imports torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from attncheck.static.analysis.patterns import method_name
from attncheck.static.analysis.shapes import ShapeQueries
from attncheck.static.analysis.syntax import _MASK_NAME, _is_big_literal, _walk_expression, is_infinite, number
from attncheck.static.facts import FunctionFacts, self_attribute


@dataclass
class _MaskEvidence:
    """What the lineage of a mask shows: its names, 0/1 evidence, additive evidence."""

    names: list[str] = field(default_factory=list)
    binary: list[str] = field(default_factory=list)
    additive: list[str] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)


_BINARY_DOC = re.compile(r"\b(0|1|0/1|1/0|True|False|bool|boolean|binary|zeros?|ones?)\b")


def _docstring_says_binary(fn: FunctionFacts, param: str) -> str | None:
    doc = fn.node.get_docstring() or ""
    for line in doc.splitlines():
        if (
            re.search(rf"\b{re.escape(param)}\b", line)
            and _BINARY_DOC.search(line)
            and "-inf" not in line
            and "additive" not in line.lower()
        ):
            return f"the docstring says {line.strip()!r}"
    return None


class MaskQueries(ShapeQueries):
    """The mask questions."""

    # -- masks -------------------------------------------------------------------

    def mask_info(
        self, expr: cst.BaseExpression, fn: FunctionFacts | None
    ) -> tuple[str | None, str | None] | None:
        """(binary evidence, additive evidence) when ``expr`` is a mask tensor, else None."""
        if self.is_scalar(expr, fn):
            return None
        found = _MaskEvidence()
        self._mask_lineage(expr, fn, found, 0)
        if not found.names and not found.binary:
            return None
        return (found.binary[0] if found.binary else None), (found.additive[0] if found.additive else None)

    def _mask_lineage(
        self, expr: cst.BaseExpression, fn: FunctionFacts | None, found: _MaskEvidence, depth: int
    ) -> None:
        if id(expr) in found.seen or depth > 10:
            return
        found.seen.add(id(expr))
        label = expr.value if type(expr) is cst.Name else self_attribute(expr)
        if label is not None:
            if _MASK_NAME.search(label):
                found.names.append(label)
            for value, vfn in self.values(expr, fn):
                self._mask_lineage(value, vfn, found, depth + 1)
            if self.is_param(expr, fn) and fn is not None and _MASK_NAME.search(label):
                described = _docstring_says_binary(fn, label)
                if described:
                    found.binary.append(described)
            return
        for node in _walk_expression(expr):
            self._classify_mask_node(node, fn, found, depth)

    def _classify_mask_node(
        self, node: cst.CSTNode, fn: FunctionFacts | None, found: _MaskEvidence, depth: int
    ) -> None:
        binary, additive = found.binary, found.additive
        if type(node) in (cst.Name, cst.Attribute) and (
            type(node) is cst.Name or self_attribute(node)
        ):
            self._mask_lineage(node, fn, found, depth + 1)
        elif type(node) is cst.Call:
            func = self.facts.canonical(node.func) or ""
            method = method_name(node) or ""
            if func in {
                "torch.tril",
                "torch.triu",
                "torch.ones",
                "torch.ones_like",
                "torch.eye",
            } or method in {"bool", "long", "int", "byte", "tril", "triu"}:
                binary.append(f"{self.code(node)} is 0/1")
            if method in {"masked_fill", "masked_fill_", "log"} or "finfo" in func or func == "torch.where":
                additive.append(self.code(node))
        elif type(node) is cst.Comparison:
            binary.append(f"{self.code(node)} is a bool comparison")
        elif type(node) is cst.UnaryOperation and type(node.operator) is cst.Minus:
            value = number(node)
            if (value is not None and value <= -100) or is_infinite(node, self.facts):
                additive.append(self.code(node))
        elif _is_big_literal(node) or is_infinite(node, self.facts):  # type: ignore[arg-type]
            additive.append(self.code(node))
