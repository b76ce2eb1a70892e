"""Attention implementations found in a file, described for the dynamic stage.

A target is an ``nn.Module`` subclass that computes attention (softmax over
q·kᵀ, ``scaled_dot_product_attention``, or a submodule that does), or whose name
says it is attention; or a top-level function that computes attention; or a
standalone rotary-embedding function such as ``apply_rotary_pos_emb``. Each
comes with its constructor and forward signatures and a guess of its kind, which
the dynamic binder treats as a hint.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

import libcst as cst

from attncheck.findings import Parameter, Target
from attncheck.static.analysis import semantics, syntax
from attncheck.static.facts import ClassFacts, FunctionFacts
from attncheck.static.tree import subtree
from attncheck.static.tree.regions import DEFINITION

if TYPE_CHECKING:
    from attncheck.static.context import FileContext

_ATTENTION_NAME = re.compile(r"attention|attn|mha|multihead|selfatten", re.I)
_ROPE_NAME = re.compile(r"rotary|rope", re.I)
# Any of them, anywhere (``kv_heads`` covers ``num_kv_heads`` and ``n_kv_heads``).
_GQA_WORDS = ("kv_heads", "num_key_value_heads", "num_query_groups", "repeat_kv", "enable_gqa")
# RoPE and causal words, matched case-insensitively (on lowered text: see _text_kinds).
_ROPE_WORDS = ("rotary", "rope", "cos_cached", "freqs_cis")
_COS_OR_SIN = re.compile(r"\b(?:cos|sin)\b")
_TRIANGLE = ("torch.tril", "torch.triu", ".tril(", ".triu(")  # ``is_causal=True`` holds "causal"
# Where a top-level definition's text ends: a line that starts a statement at the top level.
_TOP_LEVEL_LINE = re.compile(r"\n(?=[^ \t\n\r#)\]}])")
_NOT_INPUTS = re.compile(
    r"mask|pos|position|cache|past|cos|sin|freq|ids|return|output_|use_|need_|training", re.I
)
_TORCH_MODULE = {"torch.nn.Module", "torch.nn.modules.module.Module"}
_NORM = re.compile(r"Norm(?:[123]d)?(?:\b|$)")


def find_targets(context: FileContext) -> list[Target]:
    """Every attention class and function of the file, in source order."""
    sem = semantics.of(context)
    facts = context.facts
    attention_classes = {name for name, klass in facts.classes.items() if _is_attention_class(sem, klass)}
    targets = []
    for name, klass in facts.classes.items():
        kinds = _built_kinds(sem, klass)
        uses = bool(kinds & (attention_classes | {"torch.nn.MultiheadAttention"}))
        if uses and any(_NORM.search(kind) for kind in kinds):
            continue  # a block (norm + attention + MLP): its attention child is the target
        candidate = name in attention_classes or (uses and _is_module(klass, facts.classes))
        if not (candidate and "forward" in klass.methods):
            continue
        if _stacks_attention(sem, klass, attention_classes):
            continue  # a stack of layers: its attention layers are the targets
        targets.append(_class_target(context, sem, klass))
    for fn in facts.functions:
        if fn.owner is None and _is_top_level(context.module, fn) and _is_attention_function(sem, fn):
            targets.append(_function_target(context, sem, fn))
    return sorted(targets, key=lambda t: t.line)


def _built_kinds(sem: semantics.Semantics, klass: ClassFacts) -> set[str]:
    """What the class's ``self.`` attributes are built as. A constructor argument called as a class
    (timm's ``self.norm1 = norm_layer(dim)``, ``self.attn = attn_block(dim)``) counts as its
    default (``nn.LayerNorm``, ``ClassAttn``)."""
    defaults = {}
    init = klass.methods.get("__init__")
    params = init.node.params if init is not None else None
    for param in (*params.params, *params.kwonly_params) if params is not None else ():
        default = sem.facts.canonical(param.default) if param.default is not None else None
        if default is not None:
            defaults[param.name.value] = default
    kinds = (sem.module_kind(klass, attr) or "" for attr in klass.attributes)
    return {defaults.get(kind, kind) for kind in kinds}


_LOOPS = frozenset({cst.For, cst.While, cst.ListComp, cst.GeneratorExp})


def _calls_in_loops(node: cst.CSTNode, in_loop: bool = False) -> Iterator[cst.Call]:
    """The calls made inside a loop or a comprehension under ``node`` (a walk of the nodes
    that are not trivia: libcst's ``children`` lists every space and comma too)."""
    for child in subtree.children(node):
        inside = in_loop or type(child) in _LOOPS
        if inside and type(child) is cst.Call:
            yield child
        yield from _calls_in_loops(child, inside)


_JOINS = ("torch.cat", "torch.concat", "torch.concatenate", "torch.stack")


def _stacks_attention(sem: semantics.Semantics, klass: ClassFacts, attention_classes: set[str]) -> bool:
    """A stack of layers: its constructor builds attention classes of the file in a loop
    (``for _ in range(depth): self.layers.append(Attention(...))``) and it computes none itself.
    Heads built in a loop and joined in the forward (``torch.cat([h(x) for h in self.heads])``,
    the lecture's ``MultiHeadAttention``) are one multi-head attention, which stays a target."""
    init, forward = klass.methods.get("__init__"), klass.methods.get("forward")
    if init is None or not any(sem.facts.canonical(call.func) in attention_classes for call in init.calls):
        return False  # builds no attention layer at all: no need to walk __init__ for loops
    if not any(sem.facts.canonical(call.func) in attention_classes for call in _calls_in_loops(init.node)):
        return False
    if forward is not None and any(sem.facts.canonical(call.func) in _JOINS for call in forward.calls):
        return False
    return not any(_computes_attention(sem, fn) for fn in klass.methods.values())  # the costliest question last


def _is_module(klass: ClassFacts, classes: dict[str, ClassFacts], depth: int = 0) -> bool:
    """An nn.Module subclass, directly or through another class of the file."""
    if depth > 5:
        return False
    return any(
        base in _TORCH_MODULE or (base in classes and _is_module(classes[base], classes, depth + 1))
        for base in klass.bases
    )


def _computes_attention(sem: semantics.Semantics, fn: FunctionFacts) -> bool:
    for call in fn.calls:
        if (sem.facts.canonical(call.func) or "") in syntax.SDPA:
            return True
        softmax = sem.softmax(call, fn)
        if softmax is not None and sem.pipeline(softmax, fn) is not None:
            return True
    return False


def _is_attention_class(sem: semantics.Semantics, klass: ClassFacts) -> bool:
    computes = any(_computes_attention(sem, fn) for fn in klass.methods.values())
    if computes:
        return True
    return _is_module(klass, sem.facts.classes) and bool(_ATTENTION_NAME.search(klass.name))


def _is_attention_function(sem: semantics.Semantics, fn: FunctionFacts) -> bool:
    return _computes_attention(sem, fn) or bool(_ROPE_NAME.search(fn.name) and "apply" in fn.name)


def _is_top_level(module: cst.Module, fn: FunctionFacts) -> bool:
    return any(statement is fn.node for statement in module.body)


def _class_target(context: FileContext, sem: semantics.Semantics, klass: ClassFacts) -> Target:
    init = klass.methods.get("__init__")
    forward = klass.methods["forward"]
    init_params = _parameters(context.module, init.node)[1:] if init is not None else ()
    forward_params = _parameters(context.module, forward.node)[1:]
    line, text = _definition(context, klass.node)
    kinds = ["mha"] if sem.has_heads(forward) else []
    kinds += _input_kinds(forward_params) + _text_kinds(text)
    return Target(
        path=context.source.path,
        name=klass.name,
        line=line,
        kinds=tuple(dict.fromkeys(kinds)),
        is_class=True,
        init_params=init_params,
        forward_params=forward_params,
        mask_param=_mask_param(forward_params),
        docstring=klass.node.get_docstring(),
        config_class=_config_class(context, init_params),
    )


def _function_target(context: FileContext, sem: semantics.Semantics, fn: FunctionFacts) -> Target:
    params = _parameters(context.module, fn.node)
    line, text = _definition(context, fn.node)
    rope_only = bool(_ROPE_NAME.search(fn.name)) and not _computes_attention(sem, fn)
    kinds = ["rope", "function"] if rope_only else _input_kinds(params) + _text_kinds(text) + ["function"]
    return Target(
        path=context.source.path,
        name=fn.name,
        line=line,
        kinds=tuple(dict.fromkeys(kinds)),
        is_class=False,
        forward_params=params,
        mask_param=_mask_param(params),
        docstring=fn.node.get_docstring(),
    )


def _input_kinds(params: tuple[Parameter, ...]) -> list[str]:
    """ "self" for one tensor input, "cross" for separate query and key/value inputs."""
    inputs = [
        p for p in params if p.kind == "positional" and p.default is None and not _NOT_INPUTS.search(p.name)
    ]
    if len(inputs) == 1:
        return ["self"]
    return ["cross"] if len(inputs) >= 2 else []


def _text_kinds(text: str) -> list[str]:
    """What a definition's text says it does. Case-insensitive, on the lowered text: the
    words are tested with ``in``, several times cheaper than a regex (with ``re.I``, more)."""
    lowered = text.lower()
    found = []
    if any(word in text for word in _GQA_WORDS):
        found.append("gqa")
    if any(word in lowered for word in _ROPE_WORDS) or _COS_OR_SIN.search(lowered):
        found.append("rope")
    if "causal" in lowered or any(word in lowered for word in _TRIANGLE):
        found.append("causal")
    return found


def _parameters(module: cst.Module, node: cst.FunctionDef) -> tuple[Parameter, ...]:
    params = node.params
    found = [_parameter(module, p, "positional") for p in (*params.posonly_params, *params.params)]
    if isinstance(params.star_arg, cst.Param):
        found.append(_parameter(module, params.star_arg, "var_positional"))
    found += [_parameter(module, p, "keyword") for p in params.kwonly_params]
    if params.star_kwarg is not None:
        found.append(_parameter(module, params.star_kwarg, "var_keyword"))
    return tuple(found)


def _parameter(module: cst.Module, param: cst.Param, kind: str) -> Parameter:
    default = module.code_for_node(param.default) if param.default is not None else None
    annotation = module.code_for_node(param.annotation.annotation) if param.annotation is not None else None
    return Parameter(param.name.value, default, annotation, kind)  # type: ignore[arg-type]


def _mask_param(params: tuple[Parameter, ...]) -> str | None:
    return next((p.name for p in params if "mask" in p.name.lower()), None)


def _config_class(context: FileContext, init_params: tuple[Parameter, ...]) -> str | None:
    """The class of this file a constructor takes: by annotation, else a ``config`` parameter."""
    classes = context.facts.classes
    for param in init_params:
        annotation = (param.annotation or "").strip("'\"")
        if annotation in classes:
            return annotation
    if any(p.name in {"config", "cfg", "args", "params"} for p in init_params):
        return next((name for name in classes if re.search(r"(Config|Cfg|Args)$", name)), None)
    return None


def _definition(context: FileContext, node: cst.ClassDef | cst.FunctionDef) -> tuple[int, str]:
    """The line of a top-level ``class``/``def`` keyword (after any decorators), the first one of
    that name in the file, and the file's text of that definition: up to the next line that
    starts a top-level statement. Read from the file rather than generated from the tree, which
    for a large file holds only the definition's attention parts."""
    line, start = context.shared(_definition_starts).get((isinstance(node, cst.ClassDef), node.name.value), (1, 0))
    text = context.source.text
    end = _TOP_LEVEL_LINE.search(text, start)
    return line, text[start : end.end() if end is not None else len(text)]


def _definition_starts(context: FileContext) -> dict[tuple[bool, str], tuple[int, int]]:
    """(is a class, name) -> (line, offset) of the first top-level definition of it: the region
    scan's, for a large file, else only lines that start with a definition's first word are
    tried (a search for each word over the whole text is several times faster than one
    regular expression anchored at every line)."""
    if context.reduced is not None and context.reduced.definitions is not None:
        return context.reduced.definitions
    text = context.source.text
    starts = [0] if text.startswith(("class", "def", "async")) else []
    for word in ("\nclass", "\ndef", "\nasync"):
        at = text.find(word)
        while at >= 0:
            starts.append(at + 1)
            at = text.find(word, at + 1)
    found: dict[tuple[bool, str], tuple[int, int]] = {}
    line, counted = 1, 0
    for start in sorted(starts):
        match = DEFINITION.match(text, start)
        if match is None:
            continue
        line += text.count("\n", counted, start)
        counted = start
        found.setdefault((match.group(1) == "class", match.group(2)), (line, start))
    return found
