"""ATT103 unused-dropout: a dropout the module defines must be applied, and its result kept."""

from __future__ import annotations

import re

import libcst as cst

from attncheck.findings import Severity
from attncheck.static import facts
from attncheck.static.analysis import semantics, syntax
from attncheck.static.analysis.patterns import product_operands
from attncheck.static.facts import ClassFacts, FunctionFacts
from attncheck.static.rule import Invalid, Rule
from attncheck.static.rules.att1_projections.dropout_paths import skipping_branch
from attncheck.static.tree import node_fields

_HINT = "apply it to the attention weights and keep the result: attn = self.dropout(attn)"
_DROPOUT_NAME = re.compile(r"drop", re.I)
_ATTENTION_NAME = re.compile(r"attention|attn", re.I)
_DROPOUT_KEYWORDS = {"dropout", "dropout_p", "dropout_rate", "attention_dropout"}
_FUNCTIONAL_DROPOUTS = {"torch.nn.functional.dropout", "torch.dropout"}
_DROPOUT_CALLS = _FUNCTIONAL_DROPOUTS | {"torch.nn.functional.scaled_dot_product_attention"}

_CLASS = """
import math, torch, torch.nn as nn, torch.nn.functional as F
class Attention(nn.Module):
    def __init__(self, d_model, dropout=0.1):
        super().__init__()
        self.qkv = nn.Linear(d_model, 3 * d_model)
        {init}
    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        attn = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
        {body}
        return attn @ v
"""

# The Annotated Transformer's attention function, with its dropout step.
_FUNCTION = """import torch
def attention(q, k, v, scale, dropout=None):
    p = torch.softmax(q @ k.mT * scale, dim=-1)
    if dropout is not None:
        {drop}
    return p @ v
"""


def _cls(init: str, body: str) -> str:
    return _CLASS.replace("{init}", init).replace("{body}", body)


class UnusedDropout(Rule):
    code = "ATT103"
    PREFILTER = ("Dropout", "dropout", "drop")
    VALID = (
        _cls("self.attn_drop = nn.Dropout(dropout)", "attn = self.attn_drop(attn)"),
        _cls("self.dropout = dropout", "attn = F.dropout(attn, p=self.dropout, training=self.training)"),
        _cls(
            "self.drop = nn.Dropout(dropout)",
            "_ = F.scaled_dot_product_attention(q, k, v, dropout_p=self.drop.p if self.training else 0.0)",
        ),
        _cls("self.p = dropout", "_ = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p)"),
        # transformers: the rate goes to the attention function; no literal zero rate is a bug.
        _cls("self.rate = dropout", "_ = attention_interface(q, k, v, dropout=0.0 if not self.training "
             "else self.rate)"),
        _cls("self.attention_dropout = 0.0", "pass"),
        # timm's fused path drops out through SDPA's dropout_p, its other path through the module.
        _cls("self.attn_drop = nn.Dropout(dropout)\n        self.attn_drop_p = dropout",
             "if self.training:\n            _ = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop_p)\n"
             "        else:\n            attn = self.attn_drop(attn)"),
        _FUNCTION.replace("{drop}", "p = dropout(p)"),
        # a block whose attention is a submodule: its own dropout is not the attention's.
        "import torch.nn as nn\nclass Block(nn.Module):\n    def __init__(self, d, h, p):\n"
        "        self.attn = nn.MultiheadAttention(d, h, dropout=p)\n        self.dropout = nn.Dropout(p)\n"
        "    def forward(self, x):\n        return x + self.attn(x, x, x)[0]",
        "class SelfAttention:\n    def __init__(self, d, h, p):\n        self.attention = Core(d, h, p)\n"
        "        self.dropout = p\n    def forward(self, x):\n        return self.attention(x)",
        # not attention (diffusers' AutoGuidance hands its rate to a layer-skip config).
        "class AutoGuidance:\n    def __init__(self, dropout):\n        self.dropout = dropout\n"
        "    def forward(self, pred):\n        return pred",
    )
    INVALID = (
        Invalid(_cls("self.attn_drop = nn.Dropout(dropout)", "pass"), line=7, message="never applied"),
        Invalid(
            _cls("self.attn_drop = nn.Dropout(dropout)", "self.attn_drop(attn)"), line=11, message="discarded"
        ),
        Invalid(
            _cls("self.dropout = dropout", "F.dropout(attn, self.dropout, training=self.training)"),
            line=11,
            message="discarded",
        ),
        Invalid(_cls("self.attn_dropout = dropout", "pass"), line=7, message="self.attn_dropout"),
        # Falcon: the ALiBi branch drops out, the rotary one does not; used, but not on every path.
        Invalid(_cls("self.attn_drop = nn.Dropout(dropout)",
                     "if self.training:\n            attn = torch.softmax(attn, dim=-1)\n"
                     "        else:\n            attn = self.attn_drop(attn)"),
                line=11, message="its if branch computes attention without it", severity=Severity.WARNING),
        Invalid(  # the Annotated Transformer's function, its dropout's result dropped
            _FUNCTION.replace("{drop}", "dropout(p)"),
            line=5,
            message="discarded",
        ),
        # the core this file defines drops nothing out, so the caller's dropout was the attention's.
        Invalid("import torch, torch.nn as nn\nclass Core(nn.Module):\n    def forward(self, q, k, v):\n"
                "        return torch.softmax(q @ k.mT, dim=-1) @ v\nclass MHA(nn.Module):\n"
                "    def __init__(self, p):\n        self.attention = Core()\n        self.dropout = nn.Dropout(p)\n"
                "    def forward(self, x):\n        return self.attention(x, x, x)",
                line=8, message="never applied"),
        # the nn.Dropout module is dead next to HF's ``dropout=`` argument: a warning.
        Invalid(_cls("self.dropout = nn.Dropout(dropout)\n        self.attention_dropout = dropout",
                     "_ = attention_interface(q, k, v, dropout=self.attention_dropout)"),
                line=7, message="another dropout is", severity=Severity.WARNING),
    )

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        klass = self.context.klass
        if klass is None or "forward" not in klass.methods:
            return
        sem = semantics.of(self.context)
        dropouts = _dropout_attributes(sem, klass)
        discarded = _discarded_dropout_calls(sem, klass)
        # Whether the class attends is the dearer question: asked only of one with a dropout.
        if not (dropouts or discarded) or not _computes_attention(sem, klass):
            return  # a model head or a guider (VisualBERT, diffusers' AutoGuidance): not attention
        for attr, value, is_module in dropouts:
            if is_module:
                self._check_module(sem, klass, attr, value)
            else:
                self._check_rate(sem, klass, attr, value)
        for call in discarded:
            self.report(
                call,
                f"{sem.code(call)} computes dropout and its result is discarded: dropout is not in-place",
                hint=_HINT,
            )

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        """A free function that computes attention and drops out as a statement of its own
        (``F.dropout(attn, p)``, the Annotated Transformer's ``dropout(p_attn)`` on its
        ``dropout`` argument): the result is discarded."""
        fn = self.context.facts.function(node)
        if fn is None or fn.owner is not None:
            return
        sem = semantics.of(self.context)
        discarded = [call for call in fn.calls if sem.is_bare_call(call) and _is_dropout_call(sem, call, fn)]
        if discarded and any(
            sem.softmax(call, fn) is not None or product_operands(call, sem.facts) is not None for call in fn.calls
        ):
            for call in discarded:
                self.report(
                    call,
                    f"{sem.code(call)} computes dropout and its result is discarded: dropout is not in-place",
                    hint="keep the result: p_attn = dropout(p_attn)",
                )

    def _check_module(
        self, sem: semantics.Semantics, klass: ClassFacts, attr: str, value: cst.CSTNode
    ) -> None:
        if _called(sem, klass, attr) or sem.references_outside_init(klass, attr):
            self._check_paths(sem, klass, attr)
            return
        all_refs = sem.index.attr_refs.get((id(klass), attr), [])
        discarded = [ref for fn, ref in all_refs if fn.name != "__init__"]
        if discarded:
            self.report(
                discarded[0],
                f"self.{attr}(...) is called but its result is discarded: dropout is not "
                "in-place, so the attention weights are never dropped",
                hint=_HINT,
            )
        elif _applies_dropout(sem, klass) or _rate_passed_on(sem, klass, attr, value):
            self.report(
                value,
                f"self.{attr} = {sem.code(value)} is defined but never applied; another "
                "dropout is, so this one is dead or misplaced",
                severity=Severity.WARNING,
                hint=_HINT,
            )
        else:
            self.report(
                value, f"self.{attr} = {sem.code(value)} is defined but never applied in forward", hint=_HINT
            )

    def _check_paths(self, sem: semantics.Semantics, klass: ClassFacts, attr: str) -> None:
        """A dropout applied on one branch of forward and skipped on another that also attends
        (Falcon: ALiBi path yes, rotary path no) is used: a warning naming the path that skips it,
        by design in that it claims no more than the code shows (a run on that path confirms it)."""
        forward = klass.methods.get("forward")
        found = skipping_branch(forward, attr, sem.facts.canonical) if forward is not None else None
        if found is None:
            return
        skipping, applying = ("if", "else") if found.skips_when_true else ("else", "if")
        self.report(
            found.statement,
            f"self.{attr} is applied only in the {applying} branch of `if {sem.code(found.statement.test)}:`; "
            f"its {skipping} branch computes attention without it",
            severity=Severity.WARNING,
            hint=f"apply self.{attr} to the attention weights on every path, or say why one path skips it",
            by_design=True,
        )

    def _check_rate(self, sem: semantics.Semantics, klass: ClassFacts, attr: str, value: cst.CSTNode) -> None:
        # Dropout applied some other way is the commoner answer, and reading the class's
        # calls is cheaper than the walk of every expression that finds the references.
        if _applies_dropout(sem, klass) or sem.references_outside_init(klass, attr):
            return
        if syntax.number(value) == 0:
            return  # ``self.attention_dropout = 0.0``: nothing to apply
        # ``dropout=0.0`` given on purpose (DiffLlama), or the rate used as the output dropout
        # (Qwen2.5-Omni's DiT: ``nn.Dropout(config.dropout)`` in ``to_out``).
        decided = _dropout_keywords(sem, klass) or _rate_reused(sem, klass, attr, value)
        self.report(
            value,
            f"self.{attr} = {sem.code(value)} is a dropout rate that no F.dropout or dropout_p= ever uses"
            + ("; the attention is called with an explicit dropout instead" if decided else ""),
            severity=Severity.WARNING if decided else None,
            hint="attn = F.dropout(attn, p=self.dropout, training=self.training)",
        )


def _rate_passed_on(sem: semantics.Semantics, klass: ClassFacts, attr: str, value: cst.CSTNode) -> bool:
    """Whether the dropout rate also went to a submodule (``self.attention = Core(dropout)``)."""
    if not isinstance(value, cst.Call) or not value.args:
        return False
    rate = sem.code(value.args[0].value)
    return any(
        isinstance(v, cst.Call) and any(sem.code(a.value) == rate for a in v.args)
        for other, values in klass.attributes.items()
        if other != attr
        for v in values
    )


def _rate_reused(sem: semantics.Semantics, klass: ClassFacts, attr: str, value: cst.CSTNode) -> bool:
    """Whether the rate stored in ``self.attr`` is also given to a module built in ``__init__``."""
    rate = sem.code(value)
    for other, values in klass.attributes.items():
        stack: list[cst.CSTNode] = [v for v in values if other != attr]
        while stack:
            node = stack.pop()
            if isinstance(node, cst.Call) and any(sem.code(a.value) == rate for a in node.args):
                return True
            stack.extend(node_fields.children(node))
    return False


def _dropout_attributes(
    sem: semantics.Semantics, klass: ClassFacts
) -> list[tuple[str, cst.BaseExpression, bool]]:
    """The class's dropout modules (True) and dropout rates (False), with their first values."""
    found = []
    for attr, values in klass.attributes.items():
        if sem.is_dropout(klass, attr):
            found.append((attr, values[0], True))
        elif _DROPOUT_NAME.search(attr) and _is_rate(values[0]):
            found.append((attr, values[0], False))
    return found


def _discarded_dropout_calls(sem: semantics.Semantics, klass: ClassFacts) -> list[cst.Call]:
    """``F.dropout(attn)`` as a statement of its own, in any method."""
    return [
        call
        for fn in klass.methods.values()
        for call in fn.calls
        if sem.is_bare_call(call) and sem.facts.canonical(call.func) in _FUNCTIONAL_DROPOUTS
    ]


def _is_dropout_call(sem: semantics.Semantics, call: cst.Call, fn: FunctionFacts) -> bool:
    """``F.dropout(...)``, ``torch.dropout(...)``, or a call of the function's own dropout argument."""
    if sem.facts.canonical(call.func) in _FUNCTIONAL_DROPOUTS:
        return True
    return type(call.func) is cst.Name and call.func.value in fn.params and bool(_DROPOUT_NAME.search(call.func.value))


def _called(sem: semantics.Semantics, klass: ClassFacts, attr: str) -> bool:
    """Whether a method other than ``__init__`` keeps the result of ``self.attr(...)``: a use
    ``references_outside_init`` would find, read from the methods' calls instead of a walk of
    every expression of the class (facts.py's calls of a method, like that walk, leave out
    lambdas and nested functions)."""
    return any(
        facts.self_attribute(call.func) == attr and not sem.is_bare_call(call)
        for fn in klass.methods.values() if fn.name != "__init__"
        for call in fn.calls
    )


def _computes_attention(sem: semantics.Semantics, klass: ClassFacts) -> bool:
    """A method outside ``__init__`` calls an attention function, or takes a softmax or a q·kᵀ
    product (the callee's name is the cheaper test, so it goes first).

    A submodule the class builds (``self.attn = nn.MultiheadAttention(d, h, dropout=p)``,
    ``self.attention = Core(...)``) attends, and drops out, on its own: a block that only calls
    one has no attention weights to drop out, so its unused dropout is no ATT103."""
    methods = [fn for fn in klass.methods.values() if fn.name != "__init__"]
    for fn in methods:
        for call in fn.calls:
            func = sem.facts.canonical(call.func) or ""
            if func in syntax.SDPA or (
                _ATTENTION_NAME.search(func.rsplit(".", 1)[-1]) and not _built_submodule(sem, klass, call.func)
            ):
                return True  # ``attention_interface(q, k, v, dropout=...)``, ``self.attention(q, k, v)``
    return any(
        sem.softmax(call, fn) is not None or product_operands(call, sem.facts) is not None
        for fn in methods
        for call in fn.calls
    )


def _built_submodule(sem: semantics.Semantics, klass: ClassFacts, func: cst.BaseExpression) -> bool:
    """Whether ``func`` is ``self.attr`` and ``__init__`` builds ``attr`` as a module that drops
    out on its own: a library or imported module (``nn.MultiheadAttention``), or a class of this
    file with a dropout of its own (seed 000's ``ScaledDotProductAttention``). A class of this
    file without one leaves the attention dropout to its caller, so the caller's stays in question."""
    attr = facts.self_attribute(func)
    built = klass.constructed_as(attr, sem.facts) if attr is not None and attr not in klass.methods else None
    if built is None:
        return False  # a method, or a stored function (``self.attn_fn = ALL_ATTENTION_FUNCTIONS[impl]``)
    inner = sem.facts.classes.get(built)
    return inner is None or bool(_dropout_attributes(sem, inner))


def _is_rate(value: cst.BaseExpression) -> bool:
    kind = type(value)  # exact classes: isinstance on libcst's is slow
    return kind is cst.Name or kind is cst.Float or (kind is cst.Attribute and "drop" in value.attr.value)


def _dropout_keywords(sem: semantics.Semantics, klass: ClassFacts) -> list[cst.BaseExpression]:
    """The values of ``dropout=``/``dropout_p=`` passed to any call outside ``__init__``
    (HF's ``attention_interface(..., dropout=0.0 if not self.training else self.attention_dropout)``)."""
    return [
        arg.value
        for fn in klass.methods.values() if fn.name != "__init__"
        for call in fn.calls
        for arg in call.args
        if arg.keyword is not None and arg.keyword.value in _DROPOUT_KEYWORDS
    ]


def _applies_dropout(sem: semantics.Semantics, klass: ClassFacts) -> bool:
    """Whether any method applies dropout some other way (a module, F.dropout, dropout_p=,
    a non-zero ``dropout=`` handed to an attention function)."""
    if any(syntax.number(value) != 0 for value in _dropout_keywords(sem, klass)):
        return True
    for fn in klass.methods.values():
        if fn.name == "__init__":
            continue
        for call in fn.calls:
            if sem.facts.canonical(call.func) in _DROPOUT_CALLS and not sem.is_bare_call(call):
                return True
            attr = facts.self_attribute(call.func)
            if attr is not None and sem.is_dropout(klass, attr) and not sem.is_bare_call(call):
                return True
    return False
