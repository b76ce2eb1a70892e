"""What a node spells: numbers, strings, call arguments, einsum specs, and the names people give attention quantities.

Part of the analyses behind ``semantics.Semantics`` (see its docstring); it never imports torch.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import TYPE_CHECKING

import libcst as cst

from attncheck.static.facts import FileFacts, number_value, self_attribute
from attncheck.static.tree import subtree

if TYPE_CHECKING:
    from attncheck.static.context import FileContext

# -- names people give to attention quantities ---------------------------------

_NAME_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "head_dim",
        re.compile(
            r"(d_?k|d_?head|head_?dim|dim_?head|head_?size|attention_head_size|size_per_head|dim_per_head"
            r"|per_head_dim|d_?kv|qk_head_dim|head_dim_qk|hd|d_qk|depth|key_size|kv_channels)",
            re.I,
        ),
    ),
    (
        "num_heads",
        re.compile(
            r"(num_?heads?|n_?heads?|heads|nheads?|num_attention_heads|head_?num|num_query_heads"
            r"|num_q_heads|n_q_heads)",
            re.I,
        ),
    ),
    (
        "seq_len",
        re.compile(
            r"(seq_?len(gth)?|sequence_length|n_?tokens|num_tokens|tgt_len|src_len|q_len|kv_len|k_len"
            r"|key_len|query_len|kv_seq_len|q_seq_len|seq_len_[qk]|len_[qkv]|max_seq_len|block_size"
            r"|context_length|n_ctx)",
            re.I,
        ),
    ),
    (
        "d_model",
        re.compile(
            r"(d_?model|embed_?dim|n_?embd|n_?embed|hidden_?size|hidden_?dim|dim|model_?dim|d_?embed"
            r"|emb_?dim|embedding_?dim|embed_?size|emb_?size|width|n_?state|all_head_size|inner_dim)",
            re.I,
        ),
    ),
    ("batch", re.compile(r"(batch_?size|bsz|bs)", re.I)),
)
# Single capital letters are read case-sensitively: S is a length, s may be anything.
_LETTERS = {
    "S": "seq_len",
    "T": "seq_len",
    "L": "seq_len",
    "C": "d_model",
    "E": "d_model",
    "D": "d_model",
    "H": "num_heads",
    "h": "num_heads",
    "B": "batch",
}

DESCRIPTION = {
    "head_dim": "the head dimension",
    "num_heads": "the number of heads",
    "seq_len": "the sequence length",
    "d_model": "the model width (d_model)",
    "batch": "the batch size",
}

_SCALE_NAME = re.compile(
    r"(scale|scaling|temperature|norm_factor|sm_scale|softmax_scale|multiplier|inv_sqrt|rsqrt)", re.I
)
_MASK_NAME = re.compile(r"mask|tril|triu|causal", re.I)
_ATTENTION_CALL = re.compile(r"attention|attn", re.I)
_HEAD_COUNT = re.compile(r"(?:^|[._])(?:num_?|n_?)?heads?(?:$|_)|num_heads|n_head", re.I)

_SOFTMAX = {"torch.softmax", "torch.nn.functional.softmax", "torch.special.softmax"}
SDPA = {"torch.nn.functional.scaled_dot_product_attention", "scaled_dot_product_attention"}
_PRODUCTS = {"torch.matmul", "torch.bmm", "torch.einsum", "torch.baddbmm", "einsum", "opt_einsum.contract"}
# The last names of the callees product_operands reads: the functions and the methods.
_PRODUCT_NAMES = frozenset({name.rsplit(".", 1)[-1] for name in _PRODUCTS} | {"matmul", "bmm"})
_SHAPE_KEEPING = {
    "transpose",
    "contiguous",
    "float",
    "half",
    "bfloat16",
    "double",
    "to",
    "type",
    "type_as",
    "masked_fill",
    "masked_fill_",
    "clone",
    "detach",
    "mul",
    "div",
    "divide",
    "multiply",
    "mul_",
    "div_",
    "add",
    "add_",
    "sub",
    "clamp",
    "softmax",
    "view_as",
    "expand_as",
    "repeat_interleave",
    "expand",
    "narrow",
    "swapaxes",
    "mT",
}
_DROPOUT_KINDS = ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout")
_NOT_PROJECTIONS = re.compile(
    r"(Dropout|Norm|Softmax|GELU|ReLU|SiLU|Tanh|Sigmoid|Mish|ELU|Rotary|RoPE|Embedding)", re.I
)


def is_sdpa_call(context: FileContext, call: cst.Call) -> bool:
    """Whether ``call`` is ``scaled_dot_product_attention``. A file whose text never names it
    (most files; an alias's import names it too) has no such call, and no callee of it need be
    resolved: rules ask this of every call."""
    return context.shared(_names_sdpa) and context.facts.canonical(call.func) in SDPA


def _names_sdpa(context: FileContext) -> bool:
    return "scaled_dot_product_attention" in context.source.text


@cache
def name_quantity(name: str) -> str | None:
    """The quantity a bare name stands for by convention (``d_k`` is the head dim). Kept per
    name: ``has_heads`` asks it of every name of a class, and the same names recur."""
    if name in _LETTERS:
        return _LETTERS[name]
    for kind, pattern in _NAME_PATTERNS:
        if pattern.fullmatch(name):
            return kind
    return None


def number(expr: cst.BaseExpression) -> float | None:
    """The value of a numeric literal expression (``-0.5``, ``1 / 2``), else None."""
    if type(expr) in (cst.Integer, cst.Float):
        return number_value(expr)
    if type(expr) is cst.UnaryOperation and type(expr.operator) in (cst.Minus, cst.Plus):
        inner = number(expr.expression)
        if inner is None:
            return None
        return -inner if type(expr.operator) is cst.Minus else inner
    if type(expr) is cst.BinaryOperation:
        left, right = number(expr.left), number(expr.right)
        if left is None or right is None:
            return None
        op = expr.operator
        if type(op) is cst.Add:
            return left + right
        if type(op) is cst.Subtract:
            return left - right
        if type(op) is cst.Multiply:
            return left * right
        if type(op) is cst.Divide and right:
            return left / right
    return None


def is_infinite(expr: cst.BaseExpression, facts: FileFacts) -> bool:
    """``float('inf')``, ``math.inf``, ``torch.inf``, ``np.inf`` (either sign)."""
    if type(expr) is cst.UnaryOperation:
        return is_infinite(expr.expression, facts)
    if type(expr) is cst.Call and facts.canonical(expr.func) == "float" and expr.args:
        arg = expr.args[0].value
        return type(arg) is cst.SimpleString and "inf" in arg.value.lower()
    name = facts.canonical(expr) or ""
    return name.endswith(".inf")


def keyword(call: cst.Call, *names: str) -> cst.BaseExpression | None:
    return next((a.value for a in call.args if a.keyword is not None and a.keyword.value in names), None)


def positional(call: cst.Call) -> list[cst.BaseExpression]:
    return [a.value for a in call.args if a.keyword is None and not a.star]


def string_value(expr: cst.BaseExpression) -> str | None:
    if type(expr) is cst.SimpleString:
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None


# -- helpers --------------------------------------------------------------------


def einsum_key_axis(spec: str) -> tuple[int | None, int | None] | None:
    """Where the key axis is in the output of a q·kᵀ einsum, as (index from the front,
    index from the back): the one output letter that only the second operand (k) has.
    ``'v b ... d, l b ... d -> v l b ...'`` gives (1, None). None when it is not clear."""
    inputs, arrow, output = spec.replace(" ", "").partition("->")
    operands = inputs.split(",")
    if not arrow or len(operands) != 2:
        return None
    first, second = (set(o.replace("...", "")) for o in operands)
    tokens = re.findall(r"\.\.\.|[A-Za-z]", output)
    keys = [i for i, t in enumerate(tokens) if t in second and t not in first]
    if len(keys) != 1:
        return None
    (position,) = keys
    ellipsis = tokens.index("...") if "..." in tokens else None
    front = position if ellipsis is None or position < ellipsis else None
    back = position - len(tokens) if ellipsis is None or position > ellipsis else None
    return front, back



def parenthesized(module: cst.Module, node: cst.BaseExpression) -> bool:
    """Whether parentheses group ``node`` (``dim=(1)``): libcst keeps them in ``lpar``, a tree
    built from ``ast`` (``fast_tree``) reads them from the text."""
    read = getattr(module, "parenthesized", None)
    return read(node) if read is not None else bool(node.lpar)


def short_code(module: cst.Module, node: cst.CSTNode) -> str:
    """``node``'s code, for a message: stripped, and cut at 80 characters."""
    text = module.code_for_node(node).strip()
    return text if len(text) <= 80 else text[:77] + "..."


def rearrange_sides(call: cst.Call, facts: FileFacts) -> tuple[str, str] | None:
    """The input and output sides of an einops ``rearrange(x, 'b c h w -> b (h w) c')``, else None."""
    if not (facts.canonical(call.func) or "").endswith("rearrange"):
        return None
    args = positional(call)
    if len(args) < 2:
        return None
    pattern = string_value(args[1])
    if not pattern or "->" not in pattern:
        return None
    left, right = pattern.split("->", 1)
    return left, right


def _count_axes(side: str) -> int:
    return len(re.findall(r"\([^)]*\)|[A-Za-z_][A-Za-z0-9_]*|\.\.\.", side))


def _is_big_literal(node: cst.CSTNode) -> bool:
    """A literal like 10000 or 1e9: the magnitude of an additive mask's fill."""
    return type(node) in (cst.Integer, cst.Float) and abs(number_value(node)) >= 1e4  # type: ignore[arg-type]


def _walk_expression(expr: cst.CSTNode, indices: bool = True) -> Iterator[cst.CSTNode]:
    """``expr`` and the sub-expressions its value is made of, without entering lambdas or
    nested scopes. The condition of ``a if cond else b`` and the module or function called
    (``self.pos_embed`` in ``self.pos_embed(q)``, whose constructor arguments are not its
    output) are not part of the value; with ``indices=False`` neither is what a subscript
    selects with (``bias[:, keep.bool()]`` holds ``bias``'s values, not 0/1 ones)."""
    stack, readers = [expr], subtree.READERS
    while stack:
        node = stack.pop()
        yield node
        kind = type(node)
        if kind is cst.Lambda or kind is cst.FunctionDef:
            continue
        if kind is cst.Subscript and not indices:
            stack.append(node.value)
            continue
        if kind is cst.Attribute:
            if self_attribute(node) is None:
                stack.append(node.value)
            continue
        if kind is cst.IfExp:
            stack.extend((node.body, node.orelse))
            continue
        if kind is cst.Call and (type(node.func) is cst.Name or self_attribute(node.func)):
            stack.extend(node.args)
            continue
        stack.extend(readers[kind](node))


_LAYOUT_METHODS = {
    "view", "reshape", "permute", "transpose", "expand", "repeat", "flatten", "unflatten", "unsqueeze",
    "squeeze", "split", "chunk", "unbind", "narrow", "contiguous", "to", "type", "type_as", "size",
}


def _value_parts(expr: cst.CSTNode) -> list[cst.CSTNode]:
    """The tensors ``expr``'s value is computed from, one level down: not the sizes a view
    takes, not a tensor's ``.shape``, not an IfExp condition, not the callee of a call."""
    if type(expr) is cst.Attribute:
        keep = self_attribute(expr) is None and expr.attr.value not in {"shape", "dtype", "device"}
        return [expr.value] if keep else []
    if type(expr) is cst.Subscript:
        return [expr.value]
    if type(expr) is cst.Call:
        arguments = [a.value for a in expr.args]
        if type(expr.func) is cst.Attribute and self_attribute(expr.func) is None:
            method = expr.func.attr.value
            return [expr.func.value] + ([] if method in _LAYOUT_METHODS else arguments)
        return arguments
    if type(expr) is cst.BinaryOperation:
        return [expr.left, expr.right]
    if type(expr) is cst.UnaryOperation:
        return [expr.expression]
    if type(expr) is cst.IfExp:
        return [expr.body, expr.orelse]
    if type(expr) in (cst.Tuple, cst.List):
        return [e.value for e in expr.elements]
    return []


def located(rule: cst.BatchableCSTVisitor, *nodes: cst.CSTNode) -> cst.CSTNode:
    """The first of ``nodes`` that is in the parsed tree (facts builds a few synthetic nodes)."""
    from libcst.metadata import PositionProvider

    for node in nodes:
        if rule.get_metadata(PositionProvider, node, None) is not None:
            return node
    return nodes[-1]


def _base(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``self.W`` for ``self.W.t()`` or ``self.W.T``: what a method chain starts from."""
    while True:
        if (
            type(expr) is cst.Call
            and type(expr.func) is cst.Attribute
            and not self_attribute(expr.func)
        ):
            expr = expr.func.value
        elif type(expr) is cst.Attribute and self_attribute(expr) is None:
            expr = expr.value
        else:
            return expr


def _shape_args(call: cst.Call) -> list[cst.BaseExpression]:
    args = positional(call)
    if len(args) == 1 and type(args[0]) in (cst.Tuple, cst.List):
        return [e.value for e in args[0].elements]
    return args


_ROLES = (
    (
        "qkv",
        re.compile(
            r"(^|_)(qkv|c_attn|in_proj|in_proj_weight|wqkv|to_qkv|query_key_value|att_proj)($|_)", re.I
        ),
    ),
    ("kv", re.compile(r"(^|_)(kv|to_kv|wkv)($|_)", re.I)),
    ("q", re.compile(r"(^|_)(q|query|queries|wq|to_q)($|_)", re.I)),
    ("k", re.compile(r"(^|_)(k|key|keys|wk|to_k)($|_)", re.I)),
    ("v", re.compile(r"(^|_)(v|value|values|wv|to_v)($|_)", re.I)),
    (
        "out",
        re.compile(
            r"(^|_)(o|out|output|proj|projection|dense|wo|c_proj|to_out|fc|out_proj|o_proj)($|_)", re.I
        ),
    ),
)


@cache
def projection_role(attr: str) -> str | None:
    """ "q", "k", "v", "qkv", "kv" or "out" from an attribute's name (``W_o`` -> "out"). Kept per
    name: rules ask it of every ``self.`` call, and a file calls the same few modules again and again."""
    name = attr.lower()
    for prefix in ("w_", "linear_", "lin_"):
        if name.startswith(prefix) and len(name) > len(prefix):
            name = name[len(prefix) :]
    for role, pattern in _ROLES:
        if pattern.search(name):
            return role
    return None
