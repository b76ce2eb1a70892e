"""Which calls of the same file reach a function, and what they pass it.

Attention code hands tensors between a class's helper methods (``self._merge_heads(y)``,
``self.attend(q * self.scale, k, v)``) and the plain functions of its file
(``eager_attention_forward(self, q, k, v, mask, self.scaling)``); a rule that meets a
parameter asks here what the callers give it. Calls are matched by name: ``self.name(...)``
from a method of the same class for a method, ``name(...)`` for a plain function.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from attncheck.static.analysis import syntax
from attncheck.static.facts import FileFacts, FunctionFacts, self_attribute


def calls(call: cst.Call, fn: FunctionFacts, caller: FunctionFacts) -> bool:
    """Whether ``call``, made in ``caller``, calls ``fn``."""
    if fn.owner is not None:
        return self_attribute(call.func) == fn.name and caller.owner in (fn.owner, None)
    return type(call.func) is cst.Name and call.func.value == fn.name


def bind(call: cst.Call, fn: FunctionFacts) -> dict[str, cst.BaseExpression]:
    """The arguments of ``call`` by the name of ``fn``'s parameter they bind (``self`` aside)."""
    params = list(fn.params[1:] if fn.owner is not None else fn.params)
    bound = dict(zip(params, syntax.positional(call), strict=False))
    bound.update({a.keyword.value: a.value for a in call.args if a.keyword is not None})
    return bound


def passed(
    fn: FunctionFacts, param: str, facts: FileFacts
) -> Iterator[tuple[cst.BaseExpression, FunctionFacts]]:
    """What each call of ``fn`` in the file passes as ``param``, with the calling function."""
    for caller in facts.iter_functions():
        if caller is fn:
            continue
        for call in caller.calls:
            if calls(call, fn, caller):
                argument = bind(call, fn).get(param)
                if argument is not None:
                    yield argument, caller
