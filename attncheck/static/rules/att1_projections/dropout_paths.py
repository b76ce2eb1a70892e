"""The branch of a forward that attends without the dropout its other branch applies (ATT103's warning).

Falcon's attention applies ``self.attention_dropout`` in its ALiBi branch and not in its rotary one
(transformers' own comment: "It is unclear why dropout is not applied here"). Such a dropout is not
"defined and never used": it is used on one path of the same forward. What is worth saying is the
path that skips it, so ATT103 names that branch, as a warning, not the error of a dead dropout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

from attncheck.static import facts
from attncheck.static.analysis import syntax
from attncheck.static.tree import subtree


@dataclass(frozen=True)
class SkippingBranch:
    """An ``if`` one of whose branches applies the dropout while the other attends without it."""

    statement: cst.If
    skips_when_true: bool  # the ``if`` body skips the dropout (else: the ``else``/``elif`` path does)


Canonical = Callable[[cst.CSTNode], "str | None"]  # ``FileFacts.canonical``: a callee's dotted name


def skipping_branch(fn: facts.FunctionFacts, attr: str, canonical: Canonical) -> SkippingBranch | None:
    """The first ``if``/``else`` of ``fn`` that uses ``self.attr`` on one path only, the other path
    computing attention (a softmax or an SDPA call) and dropping out no other way (timm's fused path
    passes ``dropout_p=self.attn_drop_p``); None when every attending path drops out."""
    for node in fn.preorder.nodes:  # the function's nodes, listed once for every analysis
        if type(node) is not cst.If or node.orelse is None:
            continue
        other = node.orelse if type(node.orelse) is cst.If else node.orelse.body
        in_body, in_other = _uses(node.body, attr), _uses(other, attr)
        if in_body == in_other:
            continue
        skipping = other if in_body else node.body
        if _attends(skipping, canonical) and not _drops_out(skipping, canonical):
            return SkippingBranch(node, skips_when_true=not in_body)
    return None


def _uses(node: cst.CSTNode, attr: str) -> bool:
    return any(type(n) is cst.Attribute and facts.self_attribute(n) == attr for n in subtree.preorder(node))


_DROPOUTS = {"torch.nn.functional.dropout", "torch.dropout"}
_RATE_KEYWORDS = {"dropout_p", "dropout"}


def _drops_out(node: cst.CSTNode, canonical: Canonical) -> bool:
    """``F.dropout(...)``, or a ``dropout_p=``/``dropout=`` rate that is not a literal 0."""
    for call in subtree.preorder(node):
        if type(call) is cst.Call:
            if canonical(call.func) in _DROPOUTS:
                return True
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value in _RATE_KEYWORDS and syntax.number(arg.value) != 0:
                    return True
    return False


def _attends(node: cst.CSTNode, canonical: Canonical) -> bool:
    for call in subtree.preorder(node):
        if type(call) is cst.Call:
            name = canonical(call.func) or ""
            if name in syntax.SDPA or name.rsplit(".", 1)[-1] == "softmax":
                return True
    return False
