"""Attention whose right scale is not 1/sqrt(head_dim) of the product in sight (ATT201).

The wrong-scale rule judges the factors between q·kᵀ and the softmax. Real code has
designs where that judgement does not apply, and each is recognised here from code
evidence, never from a class or model name:

- channel attention (``q.transpose(-1, -2) @ k``, DaViT, XCiT): the contraction runs
  over the tokens, so the axes the rule names are not the ones contracted;
- features one number wide (``q, k, v = qkv.unbind(-1)``): head_dim is 1;
- a helper whose q or k its caller scaled (Pegasus-X's global attention);
- no scale by design, T5-style, shown by a docstring or comment, a T5 relative attention
  bias (``has_relative_attention_bias``, the scale folded into the initialisation), or a
  subclass that passes an explicit unit scale to a fused kernel (GPT-Neo's
  ``softmax_scale=1.0``): a warning with the evidence, never an error.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator

import libcst as cst

from attncheck.static.analysis import calls, semantics, syntax
from attncheck.static.analysis.patterns import method_name, product_operands
from attncheck.static.analysis.results import Pipeline
from attncheck.static.facts import ClassFacts, FileFacts, FunctionFacts

_SAYS_UNSCALED = r"no scal|unscaled|without scal|not scaled|does not scale|avoid scaling|scaling is folded"
DOCUMENTED_UNSCALED = re.compile(rf"\bT5\b|{_SAYS_UNSCALED}", re.I)
_COMMENT_UNSCALED = re.compile(_SAYS_UNSCALED, re.I)  # a comment naming T5 may only say "copied from"
_DEF = re.compile(r"^([ \t]*)(?:async[ \t]+)?def \w+", re.M)
_CLASS = re.compile(r"^class (\w+)\(([^)]*)\)", re.M)
_TOP_LEVEL = re.compile(r"^\S", re.M)
_UNIT_SCALE = re.compile(r"\b(softmax_scale|sm_scale|scale|scaling)\s*=\s*1(?:\.0*)?(?![\w.])")
_LAST_TWO = {(-1.0, -2.0), (-2.0, -1.0)}


def root_name(expr: cst.BaseExpression) -> str | None:
    """``k`` for ``k.transpose(-2, -1)`` or ``k.mT``: the variable a product operand reads."""
    while isinstance(expr, (cst.Call, cst.Attribute, cst.Subscript)):
        if isinstance(expr, cst.Call):
            if not isinstance(expr.func, cst.Attribute):
                return None
            expr = expr.func.value
        else:
            expr = expr.value
    return expr.value if isinstance(expr, cst.Name) else None


def contracts_tokens(sem: semantics.Semantics, pipeline: Pipeline) -> bool:
    """Every product is ``a.transpose(-1, -2) @ b``: channel attention, whose contraction is
    over the token axis of q and k (DaViT's 1/sqrt(N) is right there)."""
    pairs = [product_operands(p, sem.facts) for p in pipeline.products]
    return bool(pairs) and all(
        pair is not None and len(pair) == 2 and _transposed(pair[0]) and not _transposed(pair[1])
        for pair in pairs
    )


def _transposed(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.Attribute):
        return expr.attr.value in {"mT", "T"}
    if not (isinstance(expr, cst.Call) and method_name(expr) == "transpose"):
        return False
    dims = tuple(syntax.number(a) for a in syntax.positional(expr))
    return dims in _LAST_TWO


def one_wide_features(sem: semantics.Semantics, pipeline: Pipeline) -> bool:
    """q is unbound from the last axis (``q, k, v = qkv.unbind(-1)``): every token's q is
    one number, head_dim is 1, and 1/sqrt(1) is no scale (timm CSATv2)."""
    name = root_name(pipeline.operands[0]) if pipeline.operands else None
    if name is None:
        return False
    values = pipeline.fn.assignments.get(name, [])
    return bool(values) and all(_unbound_last(sem, v, pipeline.fn) for v in values)


def _unbound_last(sem: semantics.Semantics, value: cst.BaseExpression, fn: FunctionFacts) -> bool:
    """``qkv.unbind(-1)`` of a tensor of at most 3 dims (b, n, 3): not ``view(b, s, h, d, 3)``,
    whose last-axis unbind leaves full heads."""
    call = value.value if isinstance(value, cst.Subscript) else value
    if not (isinstance(call, cst.Call) and method_name(call) == "unbind"):
        return False
    args = syntax.positional(call)
    dim = args[0] if args else syntax.keyword(call, "dim")
    rank = sem.rank(call.func.value, fn)  # type: ignore[attr-defined]
    return dim is not None and syntax.number(dim) == -1 and (rank is None or rank <= 3)


def scaled_by_caller(sem: semantics.Semantics, pipeline: Pipeline, text: str) -> bool:
    """q or k is a parameter of this function and a caller in the file scales what it passes
    (``self.attend(global_q=self.q_proj(x) * self.scaling, ...)``, through any names).
    ``text`` is the whole file: a large file is parsed only in its attention regions, which
    may leave the caller out; then the callers are parsed from the text, one by one."""
    fn = pipeline.fn
    roots = {root_name(o) for o in pipeline.operands} & set(fn.params)
    if not roots:
        return False
    callers = [(sem, f) for f in sem.facts.iter_functions() if any(calls.calls(c, fn, f) for c in f.calls)]
    if not callers:
        callers = list(_callers_in_text(text, fn))
    for where, caller in callers:
        for call in caller.calls:
            if calls.calls(call, fn, caller):
                bound = calls.bind(call, fn)
                if any(root in bound and where.operand_factors(bound[root], caller) for root in roots):
                    return True
    return False


def _callers_in_text(text: str, fn: FunctionFacts) -> Iterator[tuple[semantics.Semantics, FunctionFacts]]:
    """The functions of ``text`` that call ``fn`` by name, each parsed on its own."""
    spelled = rf"self\.{fn.name}\(" if fn.owner is not None else rf"(?<![\w.]){fn.name}\("
    for match in re.finditer(spelled, text):
        headers = list(_DEF.finditer(text, 0, match.start()))
        if not headers:
            continue
        header = headers[-1]
        indent = len(header.group(1))
        end = re.compile(rf"^ {{0,{indent}}}[^\s)\]}}]", re.M).search(text, header.end())  # not ``) -> T:``
        body = textwrap.dedent(text[header.start() : end.start() if end else len(text)])
        try:
            module = cst.parse_module(body)
        except cst.ParserSyntaxError:
            continue
        facts = FileFacts(module)
        if facts.functions and facts.functions[0].name != fn.name:
            yield semantics.Semantics(module, facts), facts.functions[0]


def unscaled_by_design(sem: semantics.Semantics, pipeline: Pipeline, text: str) -> str | None:
    """The code's own evidence that these scores are meant to be unscaled, or None (``text``:
    the whole file)."""
    fn, owner = pipeline.fn, pipeline.fn.owner
    docs = [fn.node.get_docstring() or ""] + ([owner.node.get_docstring() or ""] if owner else [])
    if DOCUMENTED_UNSCALED.search("\n".join(docs)):
        return "documented as intended, T5-style"
    if owner is None:
        return None
    comment = _comment(sem, owner)
    if comment is not None:
        return f"the class says {comment!r}"
    if "has_relative_attention_bias" in owner.attributes:
        return "T5 relative attention bias (has_relative_attention_bias): the scale is folded into the initialisation"
    unit = _unit_scale_in_family(text, owner)
    return f"{unit}: trained unscaled" if unit else None


def _comment(sem: semantics.Semantics, owner: ClassFacts) -> str | None:
    for line in sem.module.code_for_node(owner.node).splitlines():
        _, hash_, text = line.partition("#")
        if hash_ and _COMMENT_UNSCALED.search(text):
            return text.strip()
    return None


def _unit_scale_in_family(text: str, owner: ClassFacts) -> str | None:
    """A subclass (or the class) passing ``softmax_scale=1.0`` to a kernel: the same model's
    fused path says in code that no scale is the design (GPT-Neo's flash attention). Read
    from the file's text, since a large file is parsed only in its attention regions."""
    for match in _CLASS.finditer(text):
        name, bases = match.group(1), match.group(2)
        if name != owner.name and not re.search(rf"\b{re.escape(owner.name)}\b", bases):
            continue
        end = _TOP_LEVEL.search(text, match.end())
        unit = _UNIT_SCALE.search(text, match.end(), end.start() if end else len(text))
        if unit is not None:
            return f"{name} passes {unit.group(1)}=1.0"
    return None
