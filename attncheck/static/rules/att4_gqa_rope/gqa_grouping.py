"""ATT401 gqa-grouping: K/V heads tiled where query head h must use KV head h // group.

Grouped-query attention shares each KV head with ``group = Hq // Hkv``
consecutive query heads: ``repeat_interleave(group, dim=1)``, HF's
``repeat_kv`` (``x[:, :, None].expand(b, hkv, n_rep, s, d).reshape(...)``),
SDPA's ``enable_gqa=True`` and flash-attn all agree. ``.repeat(1, group, 1, 1)``,
``torch.tile`` or an expand with the group axis *before* the KV-head axis tile
the heads instead, so query head h uses KV head h % Hkv. That is self-consistent
when trained from scratch and used everywhere (a warning), and wrong when the
file also expands the grouped way somewhere or loads a pretrained checkpoint
(an error).
"""

from __future__ import annotations

import re

import libcst as cst

from attncheck.findings import Severity
from attncheck.static.analysis import rope as rp
from attncheck.static.context import FileContext
from attncheck.static.facts import FileFacts, dotted_name, integer_value
from attncheck.static.rule import Invalid, Rule
from attncheck.static.rules.att4_gqa_rope import kv_heads

_KV_COUNTS = re.compile(
    r"kv_heads?|key_value_heads|key_value_groups|n_rep|num_groups|n_kv|kv_groups|queries_per_kv"
)
_GROUP = re.compile(r"group|rep\b|queries_per_kv", re.IGNORECASE)
_KV_HEADS = re.compile(r"kv|key_value", re.IGNORECASE)
# What a group-sized tiling may legitimately widen besides K/V: masks, biases, positions.
_NOT_KV = re.compile(r"mask|bias|pos|freq|cos|sin|rope|rotary|alibi|slope", re.IGNORECASE)
_SDPA_FUNCTION = "torch.nn.functional.scaled_dot_product_attention"
PRETRAINED_LOADERS = ("from_pretrained", "load_state_dict")  # words of a file that loads trained weights

_MODULE = """
import torch
import torch.nn as nn

class GQA(nn.Module):
    def __init__(self, d_model, num_heads, num_kv_heads):
        super().__init__()
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = d_model // num_heads
        self.num_groups = num_heads // num_kv_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.kv_proj = nn.Linear(d_model, 2 * num_kv_heads * self.head_dim)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.num_heads, self.head_dim).transpose(1, 2)
        k, v = self.kv_proj(x).view(b, s, 2, self.num_kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        k = k.repeat_interleave(self.num_groups, dim=1)
        v = v.repeat_interleave(self.num_groups, dim=1)
        return q, k, v
"""

_REPEAT_KV = """
def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)
"""

_SDPA = _MODULE.replace(
    "k = k.repeat_interleave(self.num_groups, dim=1)",
    "return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)",
)
_TILED = _MODULE.replace("repeat_interleave(self.num_groups, dim=1)", "repeat(1, self.num_groups, 1, 1)")
_EINOPS = """
from einops import repeat

def expand(k, v, num_heads, num_kv_heads):
    k = repeat(k, 'b h n d -> b (h g) n d', g=num_heads // num_kv_heads)
    v = repeat(v, 'b h n d -> b (h g) n d', g=num_heads // num_kv_heads)
    return k, v
"""
_MIXED = _MODULE.replace("v.repeat_interleave(self.num_groups, dim=1)", "v.repeat(1, self.num_groups, 1, 1)")


class GqaGrouping(Rule):
    code = "ATT401"
    PREFILTER = ("kv_head", "key_value_head", "key_value_groups", "n_rep", "num_groups", "n_kv", "kv_groups")
    VALID = (
        _MODULE,
        _REPEAT_KV,
        _SDPA,
        _EINOPS,
        # the same expansion written with .repeat on a new axis after the KV heads.
        "def repeat_kv(x, n_rep):\n    b, n_kv_heads, s, d = x.shape\n"
        "    return x.unsqueeze(2).repeat(1, 1, n_rep, 1, 1).reshape(b, n_kv_heads * n_rep, s, d)\n",
        # MQA: one KV head, so tiling and grouping coincide; the factor is the query head count.
        "def mqa(q, k, v, num_heads, num_kv_heads=1):\n"
        "    return q, k.repeat(1, num_heads, 1, 1), v.repeat(1, num_heads, 1, 1)\n",
        # a .repeat on a mask, with a literal.
        "def widen(mask, n_rep):\n    return mask.repeat(1, 1, 2, 1)\n",
    )
    INVALID = (
        Invalid(_TILED, line=18, message="h // ", severity=Severity.WARNING),
        Invalid("def repeat_kv(x, n_rep):\n    return x.repeat(1, n_rep, 1, 1)\n", line=2),
        Invalid(_MIXED, line=19, severity=Severity.ERROR, message="mixes"),
        Invalid(_REPEAT_KV + "\ndef other_path(k, n_rep):\n    return k.repeat(1, n_rep, 1, 1)\n",
                line=10, severity=Severity.ERROR),
        Invalid("import torch\n\ndef expand(xk, xv, n_rep):\n    xk = torch.tile(xk, (1, 1, n_rep, 1))\n"
                "    return xk, xv\n\nmodel = Llama.from_pretrained('x')\n",
                line=4, severity=Severity.ERROR, message="pretrained"),
        Invalid(_REPEAT_KV.replace("[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep,",
                                   "[:, None].expand(batch, n_rep, num_key_value_heads,"), line=6),
        Invalid("def expand(key_states, num_heads, num_key_value_heads):\n"
                "    return key_states.repeat(1, num_heads // num_key_value_heads, 1, 1)\n", line=2),
        Invalid("import torch\ndef widen(memory, n_rep):\n    return torch.cat([memory] * n_rep, dim=1)\n",
                line=3, message="tiles"),
        Invalid(_SDPA.replace(", enable_gqa=True", ""), line=18, severity=Severity.ERROR, message="enable_gqa"),
        Invalid(_EINOPS.replace("(h g)", "(g h)"), line=5, message="tiles"),
        # the group count read through attributes whose names say neither "kv" nor "rep".
        Invalid(_MODULE.replace("self.num_groups = num_heads // num_kv_heads",
                                "self.h, self.g = num_heads, num_kv_heads")
                .replace("k.repeat_interleave(self.num_groups, dim=1)", "torch.cat([k] * (self.h // self.g), dim=1)"),
                line=18, severity=Severity.ERROR, message="tiles"),
    )

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self._tiled: list[tuple[cst.Call, str]] = []
        self._grouped = False  # some path expands K/V the grouped way
        self._ungrouped: list[tuple[cst.Call, str]] = []  # SDPA calls given K/V still in the KV heads

    def visit_Call(self, node: cst.Call) -> None:
        name = rp.last_name(node.func)
        if (name == "repeat_interleave" and any(self._is_group(a.value) for a in node.args)) or any(
            a.keyword is not None and a.keyword.value == "enable_gqa" for a in node.args
        ):
            self._grouped = True
        elif name in ("repeat_kv", "_repeat_kv"):
            # an imported repeat_kv is HF's; one defined here is judged on its own body.
            self._grouped = self._grouped or not any(fn.name == name for fn in self.context.facts.functions)
        elif self.context.facts.canonical(node.func) == "einops.repeat":
            self._check_einops(node)
        elif name in ("repeat", "tile", "expand"):
            self._check_expansion(node, name)
        elif name == "cat":
            self._check_concatenation(node)
        elif self.context.facts.canonical(node.func) == _SDPA_FUNCTION:
            self._check_sdpa_heads(node)

    def leave_Module(self, original_node: cst.Module) -> None:
        for node, split in self._ungrouped:
            self.report(
                node,
                f"scaled_dot_product_attention gets K/V split into the KV heads ({split}) and Q into the "
                "query heads, with no expansion and no enable_gqa=True: SDPA pairs query head h with key "
                "head h, so it fails when the counts differ (or broadcasts one KV head)",
                severity=Severity.ERROR,
                hint="pass enable_gqa=True, or expand K/V first: k.repeat_interleave(num_heads // num_kv_heads, dim=1)",
            )
        if not self._tiled or not _KV_COUNTS.search(self.context.source.text):
            return
        pretrained = next((word for word in PRETRAINED_LOADERS if word in self.context.source.text), None)
        if self._grouped:
            severity = Severity.ERROR
            why = ("the file mixes it with a grouped expansion (repeat_interleave / repeat_kv / "
                   "enable_gqa), so the two paths disagree")
        elif pretrained is not None:
            severity = Severity.ERROR
            why = f"the file loads a pretrained checkpoint ({pretrained}), trained with the grouped layout"
        else:
            severity = Severity.WARNING
            why = "this is consistent only if used everywhere and no pretrained checkpoint is loaded"
        for node, shown in self._tiled:
            self.report(
                node,
                f"{shown} tiles the KV heads, so query head h uses KV head h % num_kv_heads instead of "
                f"h // group as HF repeat_kv, SDPA enable_gqa and flash-attn do; {why}",
                severity=severity,
                hint="k.repeat_interleave(group, dim=1), or "
                "k[:, :, None].expand(b, num_kv_heads, group, s, d).reshape(b, num_heads, s, d)",
            )

    # -- recognition ----------------------------------------------------------

    def _check_expansion(self, node: cst.Call, name: str) -> None:
        receiver = _receiver(node, self.context.facts, name)
        if receiver is None or not self._is_kv_tensor(receiver):
            return
        sizes = _sizes(node, self.context.facts, name)
        groups = [i for i, size in enumerate(sizes) if self._is_group(size)]
        if not groups:
            return
        position = groups[0]
        if name == "expand":
            # grouped when the group axis follows the KV-head axis, tiled when it precedes it.
            before = sizes[position - 1] if position > 0 else None
            after = sizes[position + 1] if position + 1 < len(sizes) else None
            if before is not None and _KV_HEADS.search(self._text(before)):
                self._grouped = True
                return
            if after is None or self._is_group(after) or not _KV_HEADS.search(self._text(after)):
                return
        else:
            inserted = _inserted_axis(receiver)
            if inserted is not None and not inserted == position == 1:
                self._grouped = True  # a new axis after the KV heads: the grouped layout
                return
        self._tiled.append((node, self._text(node)))

    def _check_einops(self, node: cst.Call) -> None:
        """``repeat(k, 'b h n d -> b (g h) n d', g=group)``: a new axis sized by the group count joined
        with the KV-head axis, before it (tiled, head h reads KV head h % Hkv) or after it
        (``'(h g)'``, grouped)."""
        args = [a for a in node.args if a.keyword is None]
        pattern = _string(args[1].value) if len(args) == 2 else None
        if pattern is None or "->" not in pattern or not self._is_kv_tensor(args[0].value):
            return
        source, _, target = pattern.partition("->")
        known = set(source.replace("(", " ").replace(")", " ").split())
        sizes = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
        for group in re.findall(r"\(([^()]*)\)", target):
            names = group.split()
            new = [n for n in names if n not in known and n in sizes and self._is_group(sizes[n])]
            old = [n for n in names if n in known]
            if len(names) == 2 and len(new) == 1 and len(old) == 1:
                if names[0] == new[0]:
                    self._tiled.append((node, self._text(node)))
                else:
                    self._grouped = True

    def _is_group(self, size: cst.BaseExpression) -> bool:
        """``n_rep``, ``self.num_groups``, ``num_heads // num_kv_heads``, or a name bound to one."""
        resolved = self.context.facts.resolve(size, self.context.function)
        for candidate in (size, resolved):
            if _GROUP.search(self._text(candidate)):
                return True
        if not (isinstance(resolved, cst.BinaryOperation) and isinstance(resolved.operator, cst.FloorDivide)):
            return False
        # heads over the KV-head count, that count read through ``self.g = num_groups`` if need be.
        divisor = self.context.facts.resolve(resolved.right, self.context.function)
        return any(_KV_HEADS.search(self._text(d)) or _GROUP.search(self._text(d)) for d in (resolved.right, divisor))

    def _check_concatenation(self, node: cst.Call) -> None:
        """``torch.cat([k] * n_rep, dim=1)`` or ``torch.cat([k for _ in range(n_rep)], 1)``: n_rep copies
        of the whole KV-head axis one after the other, the tiled layout."""
        copied = _copies(node.args[0].value) if node.args and node.args[0].keyword is None else None
        if copied is not None and self._is_group(copied[1]) and self._is_kv_tensor(copied[0]):
            self._tiled.append((node, self._text(node)))

    def _check_sdpa_heads(self, node: cst.Call) -> None:
        """SDPA handed K or V split into the KV heads with nothing widening them and no ``enable_gqa``."""
        if any(a.keyword is not None and a.keyword.value == "enable_gqa" for a in node.args):
            return
        fn = self.context.function
        query, key = (_argument(node, position, name) for position, name in ((0, "query"), (1, "key")))
        if query is None or key is None or kv_heads.kv_split(query, fn, self.context.facts, self._text) is not None:
            return
        split = kv_heads.kv_split(key, fn, self.context.facts, self._text)
        if split is not None:
            self._ungrouped.append((node, self._text(split)))

    def _is_kv_tensor(self, receiver: cst.BaseExpression) -> bool:
        """A tensor widened by a KV group count is K/V, whatever its name (``memory``, ``kv``,
        ``states``), unless it is named as a mask, a bias or a position table."""
        root = _root(receiver)
        return root is not None and not _NOT_KV.search(root)

    def _text(self, node: cst.CSTNode) -> str:
        return self.context.module.code_for_node(node)


def _receiver(node: cst.Call, facts: FileFacts, name: str) -> cst.BaseExpression | None:
    if facts.canonical(node.func) == f"torch.{name}":
        return node.args[0].value if name == "tile" and node.args else None
    return node.func.value if isinstance(node.func, cst.Attribute) else None


def _sizes(node: cst.Call, facts: FileFacts, name: str) -> list[cst.BaseExpression]:
    """Per-axis sizes of ``x.repeat(a, b)``, ``x.repeat((a, b))`` or ``torch.tile(x, (a, b))``."""
    args = [a.value for a in node.args if a.keyword is None]
    if facts.canonical(node.func) == f"torch.{name}":
        args = args[1:]
    if len(args) == 1 and isinstance(args[0], (cst.Tuple, cst.List)):
        return [e.value for e in args[0].elements]
    return args


def _copies(pieces: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(tensor, count) for ``[x] * count``, ``count * [x]`` or ``[x for _ in range(count)]``."""
    if type(pieces) is cst.BinaryOperation and type(pieces.operator) is cst.Multiply:
        listed, count = (pieces.left, pieces.right) if type(pieces.left) is cst.List else (pieces.right, pieces.left)
        if type(listed) is cst.List and len(listed.elements) == 1:
            return listed.elements[0].value, count
    if type(pieces) is cst.ListComp and type(pieces.for_in.iter) is cst.Call:
        loop = pieces.for_in.iter
        if rp.last_name(loop.func) == "range" and len(loop.args) == 1:
            return pieces.elt, loop.args[0].value
    return None


def _string(node: cst.BaseExpression) -> str | None:
    """The text of a plain string literal."""
    return node.evaluated_value if type(node) is cst.SimpleString and isinstance(node.evaluated_value, str) else None


def _argument(node: cst.Call, position: int, keyword: str) -> cst.BaseExpression | None:
    """The argument of ``node`` at ``position`` or named ``keyword``."""
    positional = [a.value for a in node.args if a.keyword is None and not a.star]
    if position < len(positional):
        return positional[position]
    return next((a.value for a in node.args if a.keyword is not None and a.keyword.value == keyword), None)


def _inserted_axis(receiver: cst.BaseExpression) -> int | None:
    """The axis a ``None`` index or ``unsqueeze(i)`` adds right before the expansion."""
    if isinstance(receiver, cst.Subscript):
        for position, element in enumerate(receiver.slice):
            if isinstance(element.slice, cst.Index) and dotted_name(element.slice.value) == "None":
                return position
    if isinstance(receiver, cst.Call) and rp.method_call(receiver, "unsqueeze") and receiver.args:
        return integer_value(receiver.args[0].value)
    return None


def _root(node: cst.BaseExpression) -> str | None:
    """``k`` for ``k``, ``self.k``, ``k[:, :, None]``, ``k.transpose(1, 2)``."""
    while True:
        if isinstance(node, cst.Subscript):
            node = node.value
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            node = node.func.value
        elif isinstance(node, cst.Attribute):
            return node.attr.value
        elif isinstance(node, cst.Name):
            return node.value
        else:
            return None
