"""ATT204 sqrt-of-number: ``torch.sqrt`` takes a tensor, not a Python number."""

from __future__ import annotations

import libcst as cst

from attncheck.findings import Edit
from attncheck.static import edits
from attncheck.static.analysis import semantics
from attncheck.static.context import FileContext
from attncheck.static.rule import Invalid, Rule

_NUMBER_CALLS = {"len", "int", "float", "math.sqrt"}


class SqrtOfNumber(Rule):
    code = "ATT204"
    PREFILTER = ("sqrt",)
    VALID = (
        "scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))",
        "scores = scores / torch.sqrt(torch.tensor(d_k, dtype=torch.float32))",
        "def f(q, d):\n    return torch.sqrt(q)",
        "class A:\n    def __init__(self, d_model, h):\n        self.d_k = d_model // h\n"
        "    def forward(self, s):\n"
        "        return s / torch.sqrt(torch.tensor(self.d_k, dtype=torch.float32))",
        "def f(x, scale):\n    return torch.sqrt(scale)",
    )
    INVALID = (
        Invalid("scores = q @ k.transpose(-2, -1) / torch.sqrt(64)", line=1, message="64",
                fixed="import math\nscores = q @ k.transpose(-2, -1) / math.sqrt(64)"),
        Invalid("def f(q, k):\n    d = q.size(-1)\n    return q @ k / torch.sqrt(d)", line=3),
        Invalid("def f(q, k, n):\n    S = q.shape[1]\n    return (q @ k).divide(torch.sqrt(S))", line=3),
        Invalid("def f(q, k):\n    n, s, e = q.shape\n    return q @ k / torch.sqrt(e // 8)", line=3),
        Invalid(
            "class A:\n    def __init__(self, d_model, num_heads):\n        self.d_k = d_model // num_heads\n"
            "    def forward(self, s):\n        return s / torch.sqrt(self.d_k)",
            line=5,
            message="self.d_k",
        ),
        Invalid(
            "class A:\n    def __init__(self, n_head):\n        self.n_head = n_head\n"
            "    def forward(self, query):\n        N, S, E = query.shape\n        H = self.n_head\n"
            "        return torch.sqrt(E // H)",
            line=7,
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.facts.canonical(node.func) != "torch.sqrt" or len(node.args) != 1:
            return
        argument = node.args[0].value
        if not _is_python_number(argument, self.context):
            return
        shown = self.context.module.code_for_node(argument)
        self.report(
            node,
            f"torch.sqrt({shown}) is called on a Python number, so every forward raises "
            "TypeError: torch.sqrt expects a Tensor",
            hint=f"use math.sqrt({shown}), or ({shown}) ** 0.5",
            fix=self._fix(node),
        )

    def _fix(self, node: cst.Call) -> tuple[Edit, ...]:
        """``torch.sqrt`` becomes ``math.sqrt``, adding ``import math`` after the last top-level import.

        The argument is left as written. No fix when an import already binds
        ``math`` to another module.
        """
        found = edits.module_name(self, "math")
        if found is None:
            return ()
        name, imports = found
        return edits.complete(edits.replace(self, node.func, f"{name}.sqrt"), *imports)


def _is_python_number(value: cst.BaseExpression, context: FileContext, seen: frozenset[int] = frozenset()) -> bool:
    """Literals, arithmetic on them, ``x.size(i)``, ``x.shape[i]``, ``len(...)``. ``seen``: the values
    already on the way here, so a value computed from itself (``d /= torch.sqrt(d)``) ends the walk."""
    if semantics.of(context).quantity(value, context.function) is not None:
        return True  # a dimension: d_k, self.num_heads, S = query.shape[1]
    value = context.facts.resolve(value, context.function)
    if id(value) in seen:
        return False
    seen |= {id(value)}
    if isinstance(value, (cst.Integer, cst.Float)):
        return True
    if isinstance(value, cst.UnaryOperation):
        return _is_python_number(value.expression, context, seen)
    if isinstance(value, cst.BinaryOperation):
        return _is_python_number(value.left, context, seen) and _is_python_number(value.right, context, seen)
    if isinstance(value, cst.Call):
        name = context.facts.canonical(value.func) or ""
        return name in _NUMBER_CALLS or (name.endswith(".size") and len(value.args) == 1)
    if isinstance(value, cst.Subscript):
        name = context.facts.canonical(value.value) or ""
        return name.endswith(".shape")
    return False
