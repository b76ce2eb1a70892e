"""ATT103 unused-dropout: a dropout the module defines must be applied, and its result kept."""

from __future__ import annotations

import re

import libcst as cst

from attncheck.findings import Severity
from attncheck.static import semantics
from attncheck.static.facts import ClassFacts
from attncheck.static.rule import Invalid, Rule

_HINT = "apply it to the attention weights and keep the result: attn = self.dropout(attn)"
_DROPOUT_NAME = re.compile(r"drop", re.I)
_DROPOUT_CALLS = {
    "torch.nn.functional.dropout",
    "torch.dropout",
    "torch.nn.functional.scaled_dot_product_attention",
}

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
    )

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        klass = self.context.klass
        if klass is None or "forward" not in klass.methods:
            return
        sem = semantics.of(self.context)
        for attr, values in klass.attributes.items():
            if sem.is_dropout(klass, attr):
                self._check_module(sem, klass, attr, values[0])
            elif _DROPOUT_NAME.search(attr) and _is_rate(values[0]):
                self._check_rate(sem, klass, attr, values[0])
        for fn in klass.methods.values():
            for call in fn.calls:
                if sem.is_bare_call(call) and sem.facts.canonical(call.func) in {
                    "torch.nn.functional.dropout",
                    "torch.dropout",
                }:
                    self.report(
                        call,
                        f"{sem.code(call)} computes dropout and its result is discarded: "
                        "dropout is not in-place",
                        hint=_HINT,
                    )

    def _check_module(
        self, sem: semantics.Semantics, klass: ClassFacts, attr: str, value: cst.CSTNode
    ) -> None:
        all_refs = sem.index.attr_refs.get((id(klass), attr), [])
        used = sem.references_outside_init(klass, attr)
        if used:
            return
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

    def _check_rate(self, sem: semantics.Semantics, klass: ClassFacts, attr: str, value: cst.CSTNode) -> None:
        if sem.references_outside_init(klass, attr) or _applies_dropout(sem, klass):
            return
        self.report(
            value,
            f"self.{attr} = {sem.code(value)} is a dropout rate that no F.dropout or dropout_p= ever uses",
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


def _is_rate(value: cst.BaseExpression) -> bool:
    return isinstance(value, (cst.Name, cst.Float)) or (
        isinstance(value, cst.Attribute) and "drop" in value.attr.value
    )


def _applies_dropout(sem: semantics.Semantics, klass: ClassFacts) -> bool:
    """Whether any method applies dropout some other way (a module, F.dropout, dropout_p=)."""
    for fn in klass.methods.values():
        if fn.name == "__init__":
            continue
        for call in fn.calls:
            if sem.facts.canonical(call.func) in _DROPOUT_CALLS and not sem.is_bare_call(call):
                return True
            attr = semantics.self_attribute(call.func)
            if attr is not None and sem.is_dropout(klass, attr) and not sem.is_bare_call(call):
                return True
    return False
