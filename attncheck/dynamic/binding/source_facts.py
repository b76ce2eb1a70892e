"""What a target's own code says about its arguments, read from the file's text (never imported).

Names are a weak guide to what a constructor or forward argument is: people write
``d_in``/``d_out``, ``feats``, ``n_att``... The code is a better one: an argument passed as the
in or out features of a projection is a width, one that divides a width is a head count, one
given to ``nn.Dropout`` is a rate. Likewise the forward tells the rank of its inputs
(``b, c, h, w = x.shape``), which arguments may be None (``if alibi is None``), and whether
its causality is switched off (``is_causal=False``, a ``causal=False`` default).

This module uses the standard ``ast`` module only; the binder consults it before it guesses.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Use = Literal["width", "heads", "dropout", "positions", "flag", "unread"]

_WIDTH_LAYERS = frozenset({"Linear", "Conv1d", "Conv2d", "LayerNorm", "RMSNorm", "Conv1D", "GroupNorm"})
_DROPOUT_LAYERS = frozenset({"Dropout", "Dropout1d", "Dropout2d"})
_SQUARE_BUILDERS = frozenset({"ones", "zeros", "tril", "triu", "full", "empty", "arange"})


@dataclass(frozen=True)
class CodeFacts:
    """What the target's code says; empty when the source cannot be read."""

    found: bool = False  # the definition was read
    init_uses: Mapping[str, Use] = field(default_factory=dict)
    stored: frozenset[str] = frozenset()  # attributes __init__ assigns (``self.num_heads = 8``)
    # forward argument -> the names its shape unpacks to, in order; ending in LEADING for ``x.shape[:2]``
    unpacked: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    none_checked: frozenset[str] = frozenset()  # forward arguments the code compares with None
    causal_off: bool = False  # every ``causal`` the code spells is False
    forward_doc: str = ""
    functions: frozenset[str] = frozenset()  # the file's top-level functions (``precompute_freqs_cis``)
    config_classes: frozenset[str] = frozenset()  # top-level classes built from a config (``LlamaRotaryEmbedding``)
    # forward returns its input added to what it computed (``return x + identity``, ``identity = x`` kept from
    # before the norm): the residual of a VAE / U-Net attention block (GroupNorm, attention, residual)
    input_residual: bool = False
    # the layer that forward's input goes through before anything else reads it (``h = self.norm(x)``), in a
    # forward that adds its input back: the pre-norm of a VAE / U-Net attention block ('' when there is none)
    pre_norm: str = ""
    # the axis names of every ``a, b, c, d = t.shape`` in forward, whatever ``t`` is (LDM's ``q.shape``)
    shapes_unpacked: tuple[tuple[str, ...], ...] = ()
    # The class computes no attention: no softmax, attention call or product of tensors anywhere in it, and its
    # forward calls only convolution, norm, activation, pooling and dropout layers (NextViT's ConvAttention)
    convolution_only: bool = False
    # Its output is upsampled (a transposed convolution, nn.Upsample, interpolate): it attends over tokens a
    # strided convolution downsampled first (LowFormer's ConvAttention)
    upsamples: bool = False
    post_norm_residual: bool = False  # forward ends in ``self.norm(out + hidden_states)``: a block's output
    choices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # init argument -> strings compared with
    causal_by_caller: bool = False  # stores ``self.is_causal`` for its caller, and applies no causality itself
    names_dropout: bool = True  # the code takes a dropout rate from outside (unread source: assume so)
    # the file's own constant (``n_embd = 64`` at the top of a lecture's script) a projection takes as its in_features
    global_width: int | None = None
    heads_as_modules: str = ""  # the class each head is a module of, concatenated (``torch.cat([h(x) for h in ...])``)
    # forward arguments given a position axis (``query.unsqueeze(1)``) in a forward that takes a tanh: the
    # decoder state of additive (Bahdanau) attention, one vector per example
    additive_states: frozenset[str] = frozenset()
    fields_read: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # init argument -> its attributes read
    builds_layers: bool = False  # __init__ builds a projection, norm, embedding or raw parameter: not projection-free
    batch_first: bool | None = None  # the default of its own ``batch_first`` constructor argument
    mha_batch_first: bool | None = None  # the ``batch_first`` of the ``nn.MultiheadAttention`` __init__ builds
    transposes_input: bool = False  # forward swaps its first two axes itself (``x.transpose(0, 1)``)
    bmm_operands: frozenset[str] = frozenset()  # forward arguments passed to ``torch.bmm``: 3-D tensors
    tiled_ranks: Mapping[str, int] = field(default_factory=dict)  # ``mask.repeat(1, n, 1, 1)``: mask is 4-D
    # Forward argument -> the axes its forward permutes it by (``q.permute(1, 2, 0, 3)``, also over a list of
    # arguments: ``[k.permute(...) for k in [q, k, v]]``): the layout the code turns its input from.
    permuted: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    # Forward arguments whose absence alone makes the module causal: every causal spelling (``is_causal=True``,
    # a triangle) sits under ``if <argument> is None`` (ChatGLM's core is causal when no mask is given).
    causal_without: frozenset[str] = frozenset()
    # Linear (kernel) attention: the code takes no softmax and calls no attention function anywhere, and maps
    # its queries and keys through a positive feature map (``F.elu(q) + 1``, ``relu``, ``softplus``, ``exp``,
    # ``self.feature_map(k)``): the map's name, '' otherwise
    kernel_feature_map: str = ""
    # The code itself can make attention causal: a triangle (tril/triu), a causal keyword not set to False, a
    # call of a causal-mask builder, or ``is_causal = True``; not only a name (``causal_mask = attention_mask``:
    # the caller's mask, whatever it holds). True for code that was not read.
    spells_causal: bool = True

    @property
    def ranks(self) -> dict[str, int]:
        """Forward argument -> the rank its code gives it (``b, s, d = x.shape``, ``torch.bmm(q, ...)``: 3)."""
        unpacked = {name: len(names) for name, names in self.unpacked.items() if LEADING not in names}
        return {**dict.fromkeys(self.bmm_operands, 3), **unpacked}


def read(source: str, name: str, line: int) -> CodeFacts:
    """Facts about the class or function ``name`` defined at ``line`` of ``source``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return CodeFacts()
    node = next(
        (
            n
            for n in ast.walk(tree)
            if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name
        ),
        None,
    )
    if node is None:
        return CodeFacts()
    if isinstance(node, ast.ClassDef):
        methods = {m.name: m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
        init, forward = methods.get("__init__"), methods.get("forward")
    else:
        init, forward = None, node
    uses, stored = _init_uses(init) if init is not None else ({}, frozenset())
    if init is not None:
        uses = {**dict.fromkeys(_unread(node, init), "unread"), **uses}
    unpacked = _unpacked(forward) if forward is not None else {}
    residual = forward is not None and _input_residual(forward)
    return CodeFacts(
        found=True,
        init_uses=uses,
        stored=stored,
        unpacked=unpacked,
        none_checked=_none_checked(forward) if forward is not None else frozenset(),
        causal_off=_causal_off(node, [fn for fn in (init, forward) if fn is not None]),
        causal_by_caller=_causal_by_caller(node, stored),
        choices=_choices(init) if init is not None else {},
        forward_doc=(ast.get_docstring(forward) or "") if forward is not None else "",
        functions=frozenset(n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))),
        config_classes=frozenset(n.name for n in tree.body if isinstance(n, ast.ClassDef) and _built_from_config(n)),
        post_norm_residual=forward is not None and _post_norm_residual(forward),
        input_residual=residual,
        pre_norm=_pre_norm(forward) if forward is not None and residual else "",
        shapes_unpacked=_shapes_unpacked(forward) if forward is not None else (),
        convolution_only=isinstance(node, ast.ClassDef) and forward is not None and _convolution_only(node, forward),
        upsamples=isinstance(node, ast.ClassDef) and _upsamples(node),
        builds_layers=init is not None and _builds_layers(init),
        batch_first=_batch_first(init) if init is not None else None,
        mha_batch_first=_mha_batch_first(init) if init is not None else None,
        transposes_input=forward is not None and _transposes_input(forward),
        bmm_operands=_bmm_operands(forward) if forward is not None else frozenset(),
        tiled_ranks=_tiled_ranks(forward) if forward is not None else {},
        permuted=_permuted(forward) if forward is not None else {},
        causal_without=_causal_without(forward) if forward is not None else frozenset(),
        kernel_feature_map=_kernel_feature_map(node),
        spells_causal=_spells_causality(node),
        names_dropout=_names_dropout(node),
        fields_read=_fields_read(init) if init is not None else {},
        global_width=_global_width(tree, init) if init is not None else None,
        heads_as_modules=_heads_as_modules(tree, init, forward) if init is not None and forward is not None else "",
        additive_states=_additive_states(forward) if forward is not None else frozenset(),
    )


def _arguments(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = fn.args
    return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if a.arg not in ("self", "cls")]


def _names(node: ast.AST) -> set[str]:
    """The bare names an expression reads (``config`` of ``config.n_embd`` is not one: it is no size)."""
    bases = {id(n.value) for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and id(n) not in bases}


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _init_uses(init: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[dict[str, Use], frozenset[str]]:
    """Each constructor argument's role, read from how __init__ uses it (first clear use wins),
    and the attributes __init__ assigns."""
    params = set(_arguments(init))
    uses: dict[str, Use] = {}
    stored: set[str] = set()

    def mark(names: set[str], use: Use) -> None:
        for name in names & params:
            uses.setdefault(name, use)

    for node in ast.walk(init):
        if isinstance(node, ast.Call):
            callee = _callee(node)
            values = [*node.args, *(k.value for k in node.keywords)]
            if callee in _WIDTH_LAYERS:
                mark(set().union(*(_names(v) for v in node.args[:2])) if node.args else set(), "width")
                for keyword in node.keywords:
                    if keyword.arg in ("in_features", "out_features", "in_channels", "out_channels"):
                        mark(_names(keyword.value), "width")
            elif callee in _DROPOUT_LAYERS:
                mark(set().union(*(_names(v) for v in values)) if values else set(), "dropout")
            elif callee in _SQUARE_BUILDERS:
                mark({v.id for v in node.args if isinstance(v, ast.Name)}, "positions")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mod, ast.Div)):
            if isinstance(node.right, ast.Name):
                mark({node.right.id}, "heads")
            mark(_names(node.left), "width")
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                stored |= {t.attr for t in ast.walk(target) if isinstance(t, ast.Attribute)}
        elif isinstance(node, (ast.If, ast.IfExp)) and isinstance(node.test, ast.Name):
            mark({node.test.id}, "flag")
    return uses, frozenset(stored)


def _unread(node: ast.AST, init: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Constructor arguments whose only use is ``self.window_size = window_size`` with that attribute
    read nowhere in the class (DaViT's ``WindowAttention``: the block does the windowing): any value
    builds the same module."""
    loaded = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)}
    kept: set[int] = set()
    for statement in ast.walk(init):
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Name):
            attrs = [t for t in statement.targets if isinstance(t, ast.Attribute)]
            if attrs and len(attrs) == len(statement.targets) and not any(t.attr in loaded for t in attrs):
                kept.add(id(statement.value))
    reads = [n for n in ast.walk(init) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    stored_only = {n.id for n in reads if id(n) in kept} & set(_arguments(init))
    return stored_only - {n.id for n in reads if id(n) not in kept}


def _fields_read(init: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, tuple[str, ...]]:
    """The attributes __init__ reads off each argument (``config.attention_downsample_rate``), in order."""
    params = set(_arguments(init))
    found: dict[str, list[str]] = {}
    for node in ast.walk(init):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in params:
            names = found.setdefault(node.value.id, [])
            if node.attr not in names:
                names.append(node.attr)
    return {name: tuple(attrs) for name, attrs in found.items()}


def _names_dropout(node: ast.AST) -> bool:
    """Whether the code takes a dropout rate from outside: an argument (``attn_drop``), a config's field
    (``config.attention_dropout``) or a dropout layer. A class built from a config that does none of
    these (SAM 2's, or Dia's ``self.attention_dropout = 0.0``) reads none of the config's rates."""
    for child in ast.walk(node):
        if isinstance(child, ast.arg) and "drop" in child.arg.lower():
            return True
        if isinstance(child, ast.Call) and "dropout" in _callee(child).lower():
            return True
        on_self = isinstance(child, ast.Attribute) and isinstance(child.value, ast.Name) and child.value.id == "self"
        if isinstance(child, ast.Attribute) and not on_self and "drop" in child.attr.lower():
            return True
    return False


LEADING = "..."  # the names of a shape's leading axes only (``b, n = x.shape[:2]``): more axes follow


def _leading_shape_of(value: ast.AST) -> str | None:
    """The argument whose leading axes ``value`` reads: ``x.shape[:2]``."""
    if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Slice) and value.slice.lower is None:
        return _shape_of(value.value)
    return None


def _shape_of(value: ast.AST) -> str | None:
    """The argument whose shape ``value`` reads: ``x.shape``, ``x.size()``."""
    if isinstance(value, ast.Attribute) and value.attr == "shape" and isinstance(value.value, ast.Name):
        return value.value.id
    call = value.func if isinstance(value, ast.Call) and not value.args else None
    if isinstance(call, ast.Attribute) and call.attr == "size" and isinstance(call.value, ast.Name):
        return call.value.id
    return None


def _shapes_unpacked(forward: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[tuple[str, ...], ...]:
    """The names of each tuple a shape is unpacked into anywhere in forward (``b, c, h, w = q.shape``)."""
    return tuple(
        tuple(e.id if isinstance(e, ast.Name) else "_" for e in target.elts)
        for node in ast.walk(forward)
        if isinstance(node, ast.Assign) and _shape_of(node.value) is not None
        for target in node.targets
        if isinstance(target, ast.Tuple)
    )


def _unpacked(forward: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, tuple[str, ...]]:
    """``b, s, d = x.shape`` before ``x`` is rebound: x is 3-D, its axes named b, s, d."""
    params = set(_arguments(forward))
    ranks: dict[str, tuple[str, ...]] = {}
    rebound: set[str] = set()
    for statement in forward.body:
        if not isinstance(statement, ast.Assign):
            continue
        for target in statement.targets:
            leading = _leading_shape_of(statement.value)
            source = leading or _shape_of(statement.value)
            unpacked = isinstance(target, ast.Tuple) and not any(isinstance(e, ast.Starred) for e in target.elts)
            if unpacked and source in params and source not in rebound:
                names = tuple(e.id if isinstance(e, ast.Name) else "_" for e in target.elts)  # type: ignore[union-attr]
                ranks.setdefault(source, names + ((LEADING,) if leading else ()))
            rebound |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return ranks


def _tiled_ranks(forward: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, int]:
    """Forward arguments the code tiles or broadcasts axis by axis (``mask.repeat(1, n_rep, 1, 1)``,
    ``mask.expand(b, h, q, k)``): the rank the code means them to have, one size per axis."""
    params = set(_arguments(forward))
    return {
        node.func.value.id: len(node.args)
        for node in ast.walk(forward)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("repeat", "expand") and isinstance(node.func.value, ast.Name)
        and node.func.value.id in params
        and len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args)
    }


def _none_checked(forward: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    params = set(_arguments(forward))
    found = set()
    for node in ast.walk(forward):
        if not (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id in params):
            continue
        identity = any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops)
        if identity and any(isinstance(c, ast.Constant) and c.value is None for c in node.comparators):
            found.add(node.left.id)
    return frozenset(found)


def _built_from_config(node: ast.ClassDef) -> bool:
    """The class's constructor takes a config object first (``def __init__(self, config: LlamaConfig)``)."""
    init = next((m for m in node.body if isinstance(m, ast.FunctionDef) and m.name == "__init__"), None)
    args = init.args.args[1:] if init is not None else []
    if not args:
        return False
    annotation = ast.unparse(args[0].annotation) if args[0].annotation is not None else ""
    return args[0].arg in ("config", "cfg") or annotation.strip("'\"").endswith("Config")


def _post_norm_residual(forward: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A norm layer applied to a sum with the forward's first input (``self.layer_norm(out + hidden_states)``):
    the residual and post-norm of a transformer block, inside the attention class (TVP, BERT's SelfOutput)."""
    params = _arguments(forward)
    if not params:
        return False
    for node in ast.walk(forward):
        if not (isinstance(node, ast.Call) and "norm" in _callee(node).lower() and node.args):
            continue
        added = node.args[0]
        if isinstance(added, ast.BinOp) and isinstance(added.op, ast.Add) and params[0] in _names(added):
            return True
    return False


def _input_residual(forward: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A ``return a + b`` where one side still holds the forward's first input: the input itself, never
    reassigned, or a name that copied it (``identity = x``) before the input was reassigned."""
    params = _arguments(forward)
    if not params:
        return False
    statements = [node for node in ast.walk(forward) if isinstance(node, (ast.Assign, ast.Return))]
    statements.sort(key=lambda node: (node.lineno, node.col_offset))
    holding = {params[0]}
    for node in statements:
        if isinstance(node, ast.Return):
            value = node.value
            if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
                sides = (value.left, value.right)
                kept = [isinstance(side, ast.Name) and side.id in holding for side in sides]
                computed = [isinstance(side, (ast.Name, ast.Call, ast.BinOp, ast.Subscript)) for side in sides]
                if any(kept[i] and computed[1 - i] and not kept[1 - i] for i in (0, 1)):  # not ``x + 1``
                    return True
            continue
        targets = {t.id for t in node.targets if isinstance(t, ast.Name)}
        copies = isinstance(node.value, ast.Name) and node.value.id in holding
        holding = (holding - targets) | (targets if copies else set())
    return False


def _pre_norm(forward: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The ``self.<layer>`` named like a norm that forward applies to its first input or to a plain copy of it
    (``h_ = x; h_ = self.norm(h_)``, LDM's ``AttnBlock``): what the projections of a residual block read."""
    params = _arguments(forward)
    if not params:
        return ""
    holding = {params[0]}
    for node in sorted(
        (n for n in ast.walk(forward) if isinstance(n, (ast.Assign, ast.Call))), key=lambda n: (n.lineno, n.col_offset)
    ):
        if isinstance(node, ast.Assign):
            if isinstance(node.value, ast.Name) and node.value.id in holding:
                holding |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            continue
        func = node.func
        own_layer = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"
        reads_input = bool(node.args) and isinstance(node.args[0], ast.Name) and node.args[0].id in holding
        if own_layer and reads_input and "norm" in func.attr.lower():
            return func.attr
    return ""


_ATTENDS = re.compile(r"^(mm|bmm|baddbmm|matmul|einsum)$|softmax|att|sdpa|flash|mha", re.IGNORECASE)
_PLAIN_LAYER = re.compile(r"Conv|Norm|Act|ReLU|GELU|SiLU|Hardswish|Identity|Dropout|Pool|_layer$|^act|^norm")
_UPSAMPLING = re.compile(r"^(ConvTranspose\dd|Upsample|PixelShuffle)$")  # layers: not a bias table's interpolate
_BUILTINS = frozenset({"len", "int", "float", "tuple", "list", "range", "isinstance", "getattr", "super", "min", "max"})


def _convolution_only(node: ast.ClassDef, forward: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """No attention anywhere in the class, no function of the file called from its forward (which could
    attend), and every ``self.<layer>(...)`` its forward calls was built in __init__ as a convolution, norm,
    activation, pooling or dropout layer (or from a ``*_layer`` argument)."""
    for child in ast.walk(node):
        if isinstance(child, ast.BinOp) and isinstance(child.op, ast.MatMult):
            return False
        if isinstance(child, ast.Call) and _ATTENDS.search(_callee(child)):
            return False
    if any(isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id not in _BUILTINS
           for c in ast.walk(forward)):
        return False
    built = {}
    for child in ast.walk(node):
        if isinstance(child, ast.Assign) and isinstance(child.value, ast.Call):
            for target in child.targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    built[target.attr] = _callee(child.value)
    called = [
        child.func.attr
        for child in ast.walk(forward)
        if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute)
        and isinstance(child.func.value, ast.Name) and child.func.value.id == "self"
    ]
    return bool(called) and all(_PLAIN_LAYER.search(built.get(name, "")) for name in called)


_SOFTMAX_ATTENTION = re.compile(r"softmax|scaled_dot_product|multi_head_attention|MultiheadAttention|flash|sdpa",
                                re.IGNORECASE)
_FEATURE_MAPS = re.compile(r"^(elu|relu|softplus|exp|sigmoid|feature_map|kernel_fn|phi)$")


def _kernel_feature_map(node: ast.AST) -> str:
    """The feature map of linear attention (``F.elu(q) + 1``): a positive map the code applies to queries or
    keys (not to a product: ``relu(q @ k.T)`` is scores without their softmax, a mistake) in code that takes no
    softmax and calls no attention function; '' otherwise."""
    calls = [child for child in ast.walk(node) if isinstance(child, ast.Call)]
    if any(_SOFTMAX_ATTENTION.search(_callee(call)) for call in calls):
        return ""
    if not _has_product(node):
        return ""
    products = {  # names bound to a product of tensors (``scores = q @ k.T``)
        target.id
        for child in ast.walk(node) if isinstance(child, ast.Assign) and _has_product(child.value)
        for target in child.targets if isinstance(target, ast.Name)
    }
    maps = [
        _callee(call) for call in calls
        if _FEATURE_MAPS.match(_callee(call)) and call.args
        and not _has_product(call.args[0]) and not _names(call.args[0]) & products
    ]
    return maps[0] if maps else ""


def _has_product(node: ast.AST) -> bool:
    """``a @ b``, ``matmul``, ``bmm`` or ``einsum`` anywhere in ``node``."""
    return any(
        (isinstance(child, ast.BinOp) and isinstance(child.op, ast.MatMult))
        or (isinstance(child, ast.Call) and _callee(child) in ("einsum", "matmul", "bmm"))
        for child in ast.walk(node)
    )


def _upsamples(node: ast.ClassDef) -> bool:
    """The class builds an upsampling layer (``nn.ConvTranspose2d``, ``nn.Upsample``, ``nn.PixelShuffle``)."""
    return any(isinstance(child, ast.Call) and _UPSAMPLING.search(_callee(child)) for child in ast.walk(node))


def _choices(init: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, tuple[str, ...]]:
    """Constructor arguments __init__ compares with string literals (``attention_type == "local"``,
    ``mode in ("a", "b")``), with those strings in source order: the values the class knows."""
    params = set(_arguments(init))
    found: dict[str, list[str]] = {}
    for node in ast.walk(init):
        if not (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id in params):
            continue
        for comparator in node.comparators:
            items = comparator.elts if isinstance(comparator, (ast.Tuple, ast.List, ast.Set)) else [comparator]
            for item in items:
                if isinstance(item, ast.Constant) and isinstance(item.value, str):
                    found.setdefault(node.left.id, [])
                    if item.value not in found[node.left.id]:
                        found[node.left.id].append(item.value)
    return {name: tuple(values) for name, values in found.items()}


def _causal_by_caller(node: ast.AST, stored: frozenset[str]) -> bool:
    """transformers' convention: ``self.is_causal = True`` is for the fused kernels, and the causal (and
    window) mask comes in the ``attention_mask`` the model builds. The class builds no triangle, and
    either dispatches on ``config._attn_implementation`` (its eager path adds the model's mask) or
    never uses the flag or a causal keyword itself."""
    if "is_causal" not in stored:
        return False
    dispatches, uses_flag = False, False
    for child in ast.walk(node):
        if isinstance(child, ast.Call) and _callee(child) in ("tril", "triu"):
            return False
        if isinstance(child, ast.keyword) and child.arg and "causal" in child.arg.lower():
            uses_flag = True
        elif isinstance(child, ast.Attribute) and isinstance(child.ctx, ast.Load):
            uses_flag |= child.attr == "is_causal"
            dispatches |= child.attr == "_attn_implementation"
    return dispatches or not uses_flag


def _causal_without(forward: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    """The forward arguments ``a`` such that every causal spelling of the forward (a causal keyword not set
    to False, ``tril``/``triu``) lies in the body of an ``if`` whose test requires ``a is None``, or is a
    keyword whose value requires it (``is_causal=attention_mask is None``, or a name bound to that)."""
    params = set(_arguments(forward))
    spellings = [node for node in ast.walk(forward) if _spells_causal(node)]
    if not spellings:
        return frozenset()
    guarded: dict[int, set[str]] = {}  # id of a node under an ``if a is None`` body -> those a
    bound = {  # ``is_causal = mask is None``: the names a value bound once requires to be None
        node.targets[0].id: _required_none(node.value)
        for node in ast.walk(forward) if isinstance(node, ast.Assign) and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
    }
    for node in ast.walk(forward):
        if isinstance(node, ast.If):
            names = _required_none(node.test) & params
            for inner in (n for statement in node.body for n in ast.walk(statement)):
                guarded.setdefault(id(inner), set()).update(names)
        elif isinstance(node, ast.keyword) and _spells_causal(node):
            value = node.value
            required = bound.get(value.id, set()) if isinstance(value, ast.Name) else _required_none(value)
            guarded.setdefault(id(node), set()).update(required & params)
    return frozenset(set.intersection(*(guarded.get(id(node), set()) for node in spellings)))


def _spells_causal(node: ast.AST, *, off_too: bool = False) -> bool:
    """A triangle (tril/triu) or a keyword named like causality that is not a literal False
    (``off_too``: that one too)."""
    if isinstance(node, ast.Call) and _callee(node) in ("tril", "triu", "tril_", "triu_"):
        return True
    if isinstance(node, ast.keyword) and node.arg and "causal" in node.arg.lower():
        return off_too or not (isinstance(node.value, ast.Constant) and node.value.value is False)
    return False


def _spells_causality(node: ast.AST) -> bool:
    """Whether the code can make attention causal by itself (``CodeFacts.spells_causal``)."""
    for child in ast.walk(node):
        if _spells_causal(child) or (isinstance(child, ast.Call) and "causal" in _callee(child).lower()):
            return True
        if isinstance(child, ast.Assign) and isinstance(child.value, ast.Constant) and child.value.value is True:
            named = [t.attr if isinstance(t, ast.Attribute) else getattr(t, "id", "") for t in child.targets]
            if any("causal" in name.lower() for name in named):
                return True
    return False


def _required_none(test: ast.expr) -> set[str]:
    """The names an ``if`` test requires to be None: ``a is None``, or one term of an ``and``."""
    terms = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    return {
        term.left.id
        for term in terms
        if isinstance(term, ast.Compare) and isinstance(term.left, ast.Name) and len(term.ops) == 1
        and isinstance(term.ops[0], ast.Is) and isinstance(term.comparators[0], ast.Constant)
        and term.comparators[0].value is None
    }


def _causal_off(node: ast.AST, functions: list[ast.FunctionDef | ast.AsyncFunctionDef]) -> bool:
    """Every ``causal`` spelling the forward can reach is off: ``is_causal=False``, or an attribute or
    argument that only ever holds a ``causal=False`` default of the constructor or of the forward
    (timm's ``forward(x, attn_mask=None, is_causal=False)``: the caller opts in); and no triangle
    (tril/triu). Spellings only in methods the forward never reaches (``forward_flash(...,
    is_causal=True)`` beside a masked ``forward``) switch nothing on."""
    off_defaults = set().union(*(_false_defaults(fn) for fn in functions))
    unreached = _unreached_methods(node) if isinstance(node, ast.ClassDef) else []
    spelled = any(_spells_causal(n, off_too=True) for method in unreached for n in ast.walk(method))
    parts = [p for p in node.body if p not in unreached] if isinstance(node, ast.ClassDef) else [node]
    for child in itertools.chain.from_iterable(ast.walk(part) for part in parts):
        if isinstance(child, ast.Call) and _callee(child) in ("tril", "triu"):
            return False
        if isinstance(child, ast.keyword) and child.arg and "causal" in child.arg.lower():
            spelled = True
            value = child.value
            literal_false = isinstance(value, ast.Constant) and value.value is False
            from_default = isinstance(value, ast.Attribute) and value.attr in off_defaults
            if not (literal_false or from_default or (isinstance(value, ast.Name) and value.id in off_defaults)):
                return False
    return spelled


def _unreached_methods(klass: ast.ClassDef) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The methods neither ``__init__`` nor ``forward`` reach through ``self.NAME``, directly or
    through the methods they reach (the alternative forwards of a class that keeps several)."""
    methods = {m.name: m for m in klass.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if "forward" not in methods:
        return []
    reached, todo = set(), [name for name in ("__init__", "forward") if name in methods]
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        todo += [n.attr for n in ast.walk(methods[name]) if isinstance(n, ast.Attribute) and n.attr in methods
                 and isinstance(n.value, ast.Name) and n.value.id == "self"]
    return [method for name, method in methods.items() if name not in reached]


def _false_defaults(init: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Arguments defaulting to False whose name says causal, and the attributes holding them."""
    defaults = _defaults(init)
    off = {n for n, d in defaults.items() if "causal" in n.lower() and isinstance(d, ast.Constant) and d.value is False}
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in off:
            off |= {t.attr for t in node.targets if isinstance(t, ast.Attribute)}
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple):
            for target in node.targets:
                if isinstance(target, ast.Tuple):
                    for t, v in zip(target.elts, node.value.elts, strict=False):
                        if isinstance(t, ast.Attribute) and isinstance(v, ast.Name) and v.id in off:
                            off.add(t.attr)
    return off


_LAYERS = _WIDTH_LAYERS | {"Parameter", "MultiheadAttention", "Embedding", "Bilinear"}


def _global_width(tree: ast.Module, init: ast.FunctionDef | ast.AsyncFunctionDef) -> int | None:
    """The value of a module-level integer constant that a projection built in __init__ takes as its
    input width (``nn.Linear(n_embd, head_size)`` under ``n_embd = 64``): the width the module is fed."""
    constants = {
        target.id: statement.value.value
        for statement in tree.body
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, int) and not isinstance(statement.value.value, bool)
        for target in statement.targets
        if isinstance(target, ast.Name)
    }
    for node in ast.walk(init):
        position = _INPUT_WIDTH_ARGUMENT.get(_callee(node)) if isinstance(node, ast.Call) else None
        if position is not None and len(node.args) > position:
            width = node.args[position]
            if isinstance(width, ast.Name) and width.id in constants:
                return constants[width.id]
    return None


# Where a projection takes its input width: nn.Linear(in_features, out_features), but HF's
# Conv1D(nf, nx) takes its output width first.
_INPUT_WIDTH_ARGUMENT = {"Linear": 0, "Conv1D": 1}


def _heads_as_modules(
    tree: ast.Module, init: ast.FunctionDef | ast.AsyncFunctionDef, forward: ast.FunctionDef | ast.AsyncFunctionDef
) -> str:
    """The class of the file whose instances __init__ keeps in a list (``nn.ModuleList([Head(s) for _ in
    range(n)])``) and forward concatenates (``torch.cat([h(x) for h in self.heads], dim=-1)``): heads as
    modules, each its own attention; '' otherwise."""
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    listed = {
        element.elt.func.id
        for element in ast.walk(init)
        if isinstance(element, ast.ListComp) and isinstance(element.elt, ast.Call)
        and isinstance(element.elt.func, ast.Name) and element.elt.func.id in classes
    }
    concatenated = any(
        isinstance(node, ast.Call) and _callee(node) in ("cat", "concat", "concatenate") and node.args
        and isinstance(node.args[0], (ast.ListComp, ast.GeneratorExp))
        for node in ast.walk(forward)
    )
    return min(listed) if listed and concatenated else ""


def _additive_states(forward: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    """Forward arguments the code gives a position axis (``query.unsqueeze(1)``) to add them to every key
    position, in a forward that takes a tanh: additive attention's v · tanh(W q + U k) over one query."""
    calls = [node for node in ast.walk(forward) if isinstance(node, ast.Call)]
    if not any(_callee(call) == "tanh" for call in calls):
        return frozenset()
    params = set(_arguments(forward))
    return frozenset(
        call.func.value.id
        for call in calls
        if _callee(call) == "unsqueeze" and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name) and call.func.value.id in params
        and [a.value for a in call.args if isinstance(a, ast.Constant)] == [1]
    )


def _builds_layers(init: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """__init__ builds a layer with weights (``nn.Linear``, ``nn.Parameter``, an MHA...): the module
    projects its inputs, so its input width is the model's, not a head's."""
    return any(isinstance(node, ast.Call) and _callee(node) in _LAYERS for node in ast.walk(init))


def _batch_first(init: ast.FunctionDef | ast.AsyncFunctionDef) -> bool | None:
    """The default of the constructor's own ``batch_first`` argument (the layout a user's call gets)."""
    default = _defaults(init).get("batch_first")
    return default.value if isinstance(default, ast.Constant) and isinstance(default.value, bool) else None


def _mha_batch_first(init: ast.FunctionDef | ast.AsyncFunctionDef) -> bool | None:
    """The ``batch_first`` of the ``nn.MultiheadAttention`` __init__ builds (torch's default: False), read
    through a constructor argument's default; None when it builds none or the value is not plain."""
    defaults = _defaults(init)
    for node in ast.walk(init):
        if isinstance(node, ast.Call) and _callee(node) == "MultiheadAttention":
            value = next((k.value for k in node.keywords if k.arg == "batch_first"), ast.Constant(False))
            value = defaults.get(value.id, value) if isinstance(value, ast.Name) else value
            return value.value if isinstance(value, ast.Constant) and isinstance(value.value, bool) else None
    return None


def _defaults(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, ast.expr]:
    """Each argument's default expression."""
    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    found = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]], args.defaults, strict=True))
    found.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None})
    return found


def _permuted(forward: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, tuple[int, ...]]:
    """Forward argument -> the constant axes of a ``.permute(...)`` called on it, directly or through the
    variable of a comprehension over a list of arguments (ChatGLM's ``[k.permute(1, 2, 0, 3) for k in
    [query_layer, key_layer, value_layer]]``)."""
    params = set(_arguments(forward))
    aliases = {name: {name} for name in params}  # a comprehension variable -> the arguments it runs over
    for node in ast.walk(forward):
        if isinstance(node, ast.comprehension) and isinstance(node.target, ast.Name):
            items = node.iter.elts if isinstance(node.iter, (ast.List, ast.Tuple)) else []
            over = {item.id for item in items if isinstance(item, ast.Name) and item.id in params}
            if over and len(over) == len(items):
                aliases[node.target.id] = over
    found: dict[str, tuple[int, ...]] = {}
    for node in ast.walk(forward):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "permute"):
            continue
        owner = node.func.value
        axes = tuple(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, int))
        if isinstance(owner, ast.Name) and owner.id in aliases and len(axes) == len(node.args):
            found.update(dict.fromkeys(aliases[owner.id], axes))
    return found


def _transposes_input(forward: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """``x.transpose(0, 1)``, ``x.permute(1, 0, 2)`` or ``x.swapaxes(0, 1)`` on a forward argument: the
    module converts between layouts itself, so an MHA it calls says nothing of its own input's layout."""
    params = set(_arguments(forward))
    for node in ast.walk(forward):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        if not (isinstance(owner, ast.Name) and owner.id in params):
            continue
        axes = [a.value for a in node.args if isinstance(a, ast.Constant)]
        if node.func.attr in ("transpose", "swapaxes", "swapdims") and sorted(axes) == [0, 1]:
            return True
        if node.func.attr == "permute" and axes[:2] == [1, 0]:
            return True
    return False


def _bmm_operands(forward: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    """Forward arguments given as they are to ``torch.bmm``/``baddbmm`` (or ``q.bmm(...)``): 3-D tensors,
    which 4-D per-head inputs would crash."""
    params = set(_arguments(forward))
    found = set()
    for node in ast.walk(forward):
        if isinstance(node, ast.Call) and _callee(node) in ("bmm", "baddbmm"):
            operands = list(node.args)
            if isinstance(node.func, ast.Attribute) and not (
                isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
            ):
                operands.append(node.func.value)
            found |= {o.id for o in operands if isinstance(o, ast.Name) and o.id in params}
    return frozenset(found)
