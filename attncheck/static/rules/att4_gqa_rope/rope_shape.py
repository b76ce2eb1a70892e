"""ATT403 rope-shape: cos/sin built or sliced with a width that does not match q/k.

Seed 004's RoPE class builds its cos/sin cache at full head width
(``cat((freqs, freqs))``) and then slices it to ``[..., :d_k // 2]`` before
``q * cos + rotate_half(q) * sin``, which fails to broadcast on every forward.
The same crash comes from a cache never widened from d/2 to d, and from
frequencies computed over the model width instead of the head width.
"""

from __future__ import annotations

import re

import libcst as cst

from attncheck.static.analysis import rope as rp
from attncheck.static.analysis.patterns import tracer
from attncheck.static.facts import FunctionFacts, integer_value, number_value, self_attribute
from attncheck.static.rule import Invalid, Rule

_MODEL_WIDTHS = {
    "d_model", "hidden_size", "hidden_dim", "embed_dim", "n_embd", "n_embed",
    "model_dim", "dim_model", "emb_dim", "embedding_dim", "d_embed",
}
_HEAD_WORDS = re.compile(r"num_heads|n_heads?\b|num_attention_heads|head_dim|\bd_k\b|d_head|head_size")
_TRIG = re.compile(r"cos|sin")
_HALF_WIDTH_SOURCES = {"torch.outer", "torch.ger", "torch.einsum"}
_COMBINING = {"torch.cat", "torch.concat", "torch.concatenate", "torch.stack"}

_SEED = """
import torch
import torch.nn as nn

def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)

class RoPEAttention(nn.Module):
    def __init__(self, d_model, num_heads, max_seq_len=2048):
        super().__init__()
        self.d_k = d_model // num_heads
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.d_k, 2).float() / self.d_k))
        freqs = torch.outer(torch.arange(max_seq_len).float(), inv_freq)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.register_buffer("cos_cached", emb.cos()[None, None, :, :])
        self.register_buffer("sin_cached", emb.sin()[None, None, :, :])

    def rope(self, q, seq_len):
        cos = self.cos_cached[:, :, :seq_len, :]
        sin = self.sin_cached[:, :, :seq_len, :]
        return q * cos + rotate_half(q) * sin
"""

_EXPLICIT = """
import torch

def apply_rotary(x, cos, sin):
    cos = cos[..., : cos.shape[-1] // 2]
    sin = sin[..., : sin.shape[-1] // 2]
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

def cache(dim, n):
    freqs = torch.outer(torch.arange(n).float(), 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)))
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()
"""


class RopeShape(Rule):
    code = "ATT403"
    PREFILTER = ("cos", "sin", "arange")
    VALID = (
        _SEED,
        # the written-out rotation works on halves, so half-width cos/sin are right.
        _EXPLICIT,
        # partial rotary: the cache is rotary_dim wide and q is sliced to match.
        _SEED.replace("self.d_k, 2).float() / self.d_k", "self.rotary_dim, 2).float() / self.rotary_dim")
        .replace("return q * cos + rotate_half(q) * sin",
                 "q_rot, q_pass = q[..., : self.rotary_dim], q[..., self.rotary_dim :]\n"
                 "        return torch.cat((q_rot * cos + rotate_half(q_rot) * sin, q_pass), dim=-1)"),
        # a rotary module constructed with the head width, whatever it calls it.
        """
        import torch
        import torch.nn as nn

        class RotaryEmbedding(nn.Module):
            def __init__(self, dim, base=10000):
                super().__init__()
                self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)))
        """,
        # Qwen2-VL's multimodal RoPE: the d/2-wide cos/sin go through a helper that
        # rebinds them (and widens them, in a method the linter may not see).
        """
        import torch
        import torch.nn as nn
        from transformers.models.llama.modeling_llama import rotate_half

        class VisionRotaryEmbedding(nn.Module):
            def forward(self, x, position_ids):
                freqs = position_ids[..., None].float() * self.inv_freq
                cos = freqs.cos() * self.attention_scaling
                cos = self.recomposition_frequencies(cos)
                return cos

        def apply_rotary_pos_emb(q, cos, sin):
            return q * cos + rotate_half(q) * sin
        """,
        # a sinusoidal table next to the RoPE (Kimi-K2.5's time axis): cat([sin, cos]) is d wide.
        """
        import torch
        from transformers.models.llama.modeling_llama import rotate_half

        def time_table(n, dim):
            freqs = torch.outer(torch.arange(n).float(), 1.0 / (10000 ** (torch.arange(0, dim, 2) / dim)))
            return torch.cat([freqs.sin(), freqs.cos()], dim=1)

        def apply_rotary_pos_emb(q, cos, sin):
            return q * cos + rotate_half(q) * sin
        """,
        # timm's pos_embed_sincos: a helper of the file lays the d/2 values out to d.
        """
        import torch
        from transformers.models.llama.modeling_llama import rotate_half

        def _rope_layout(x, rotate_half=False):
            return torch.cat([x, x], dim=-1) if rotate_half else x.repeat_interleave(2, -1)

        def get_embed(pos, inv_freq):
            angles = pos[:, None] * inv_freq
            sin = _rope_layout(angles.sin(), rotate_half=True)
            cos = _rope_layout(angles.cos(), rotate_half=True)
            return torch.cat([sin, cos], dim=-1)

        def apply_rotary_pos_emb(q, cos, sin):
            return q * cos + rotate_half(q) * sin
        """,
    )
    INVALID = (
        Invalid(  # an odd rotary width: cos/sin one column wider than the rotated part
            "import torch\nclass Rotary:\n    def __init__(self, rotary_dim=27, base=10000.0):\n"
            "        self.rotary_dim = rotary_dim\n"
            "        self.inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2).float() / rotary_dim))",
            line=5,
            message="is odd",
        ),
        Invalid(  # the helper the d/2 cos/sin are handed to is the rotation itself
            "import torch\nfrom transformers.models.llama.modeling_llama import rotate_half\n"
            "def apply_rotary_pos_emb(q, cos, sin):\n    return q * cos + rotate_half(q) * sin\n"
            "def rope(q, t, inv_freq):\n    freqs = torch.outer(t, inv_freq)\n"
            "    return apply_rotary_pos_emb(q, freqs.cos(), freqs.sin())\n",
            line=7,
            message="d/2",
        ),
        Invalid(  # the angles bound to the name of the inverse frequencies, with an interleaved rotation
            "import torch\ndef rotate_pairs(x):\n"
            "    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)\n"
            "def rope(q, t, dim):\n    freqs = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))\n"
            "    freqs = torch.outer(t, freqs)\n    cos, sin = freqs.cos(), freqs.sin()\n"
            "    return q * cos + rotate_pairs(q) * sin\n",
            line=7,
            message="rotate_every_two",
        ),
        Invalid(_SEED.replace("self.cos_cached[:, :, :seq_len, :]",
                              "self.cos_cached[:, :, :seq_len, :self.d_k//2]"),
                line=20, message="d_k//2"),
        Invalid(_SEED.replace("sin_cached[:, :, :seq_len, :]", "sin_cached[..., :seq_len, : self.d_k // 2]"),
                line=21),
        Invalid(_SEED.replace("emb = torch.cat([freqs, freqs], dim=-1)", "emb = freqs"),
                line=16, message="d/2"),
        Invalid(_SEED.replace("self.d_k, 2).float() / self.d_k", "d_model, 2).float() / d_model"),
                line=13, message="d_model"),
        Invalid(_SEED.replace("d_model", "hidden_size")
                .replace("self.d_k, 2).float() / self.d_k", "hidden_size, 2).float() / hidden_size"),
                line=13),
    )

    def visit_Module(self, node: cst.Module) -> None:
        index = rp.rope_index(self.context)
        if index.uses_rotation_formula:
            if index.widenings:
                self._check_slices(index)
            else:
                self._check_unwidened(index)
        for power in index.powers:
            self._check_model_width(index, power)
            self._check_odd_width(index, power)

    def _check_slices(self, index: rp.RopeIndex) -> None:
        """A full-width cache sliced back to d/2 before ``q * cos + rot(q) * sin``."""
        facts = self.context.facts
        undone = {id(w.undone) for w in index.widenings if w.undone is not None}
        for fn, node in index.subscripts:
            # the structural test first: it is cheaper than generating the code of the sliced value
            if id(node) in undone or not rp.first_half(facts, node, fn):
                continue
            if _TRIG.search(rp.code(facts, node.value)):
                self.report(
                    node,
                    f"{rp.code(facts, node)} slices the cos/sin cache to half the head width, "
                    "but it was built full width (cat((freqs, freqs))) and multiplies q/k of width "
                    "head_dim: the broadcast fails",
                    hint="keep the last dim whole: [..., :seq_len, :]",
                )

    def _check_unwidened(self, index: rp.RopeIndex) -> None:
        """cos/sin of the d/2 frequencies used directly with a full-width rotate_half."""
        facts = self.context.facts
        for fn, node in index.calls:
            argument = _trig_argument(facts, node)
            if argument is None or _combined_or_transformed(index, facts, node, fn):
                continue
            if _half_width(facts, self._value_here(argument, fn)):
                interleaved = index.layouts() == {rp.PAIR}
                self.report(
                    node,
                    f"{rp.code(facts, node)} has d/2 columns (one per frequency) but multiplies "
                    "q/k of width head_dim in x * cos + "
                    + ("rotate_every_two(x) * sin" if interleaved else "rotate_half(x) * sin"),
                    hint="emb = freqs.repeat_interleave(2, dim=-1) before .cos()/.sin()" if interleaved
                    else "emb = torch.cat((freqs, freqs), dim=-1) before .cos()/.sin()",
                )

    def _value_here(self, argument: cst.BaseExpression, fn: FunctionFacts | None) -> cst.BaseExpression:
        """What ``argument`` holds where cos/sin are taken: the one value of a name, or for a name
        bound twice (``freqs = 1.0 / ...; freqs = torch.outer(t, freqs)``) the last one before."""
        resolved = self.context.facts.resolve(argument, fn)
        if type(resolved) is cst.Name and fn is not None:
            stepped = tracer(self.context).step(resolved, fn)
            return stepped[0] if stepped is not None else resolved
        return resolved

    def _check_odd_width(self, index: rp.RopeIndex, power: rp.FrequencyPower) -> None:
        """``arange(0, rotary_dim, 2)`` for an odd ``rotary_dim`` (a literal, a parameter's default,
        or ``int(64 * 0.3)``): the ceil(w/2) frequencies widen to w + 1 columns, one more than the
        dims rotated. A width odd only for some configurations (GPT-NeoX's ``int(head_dim *
        rotary_pct)``) is left alone: the usual ones make it even."""
        positional = [a.value for a in power.arange.args if a.keyword is None]
        if len(positional) < 3 or integer_value(positional[2]) != 2:
            return
        width = positional[1]
        fn = index.scope(power.node)
        odd = _odd_value(width, fn)
        if odd is None:
            return
        shown = rp.code(self.context.facts, width)
        self.report(
            power.arange,
            f"the rotary width {shown} is odd ({odd}): arange(0, {shown}, 2) gives {odd // 2 + 1} frequencies, "
            f"and cos/sin widened from them are {odd + 1} wide, wider than the {odd} dims rotated",
            hint=f"make the rotary width even: {shown} = {shown} // 2 * 2",
        )

    def _check_model_width(self, index: rp.RopeIndex, power: rp.FrequencyPower) -> None:
        """Frequencies over d_model/hidden_size in an attention that rotates per-head q/k."""
        positional = [a.value for a in power.arange.args if a.keyword is None]
        if len(positional) < 2:
            return
        width = rp.last_name(positional[1])
        fn = index.scope(power.node)
        owner = fn.owner if fn is not None else None
        if width not in _MODEL_WIDTHS or owner is None:
            return
        if not _HEAD_WORDS.search(self.context.module.code_for_node(owner.node)):
            return
        self.report(
            power.arange,
            f"the rotary frequencies are built over {width}, the model width, but RoPE rotates "
            "each head's q/k of width head_dim: cos/sin get the wrong width",
            hint="torch.arange(0, head_dim, 2).float() / head_dim",
        )


def _trig_argument(facts, node: cst.CSTNode) -> cst.BaseExpression | None:
    """X for ``X.cos()``, ``X.sin()``, ``torch.cos(X)``, ``torch.sin(X)``."""
    if not isinstance(node, cst.Call):
        return None
    if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("cos", "sin") and not node.args:
        receiver = node.func.value
        return None if facts.canonical(receiver) in ("torch", "math", "numpy") else receiver
    if facts.canonical(node.func) in ("torch.cos", "torch.sin") and len(node.args) == 1:
        return node.args[0].value
    return None


def _combined_or_transformed(index: rp.RopeIndex, facts, trig: cst.CSTNode, fn) -> bool:
    """The d/2-wide cos/sin does not reach q/k as it is: it is concatenated with something
    (``cat([freqs.sin(), freqs.cos()])``, a sinusoidal table of width d), or the name it is
    bound to is passed through a helper that rebinds it (``cos = self.recompose(cos)``,
    Qwen2-VL's multimodal RoPE), which may widen it."""
    node = trig
    while (parent := index.parent(node)) is not None and not isinstance(
        parent, (cst.Assign, cst.BaseSmallStatement, cst.BaseCompoundStatement)
    ):
        if isinstance(parent, cst.Call) and facts.canonical(parent.func) in _COMBINING:
            return True
        if isinstance(parent, cst.Call) and isinstance(node, cst.Arg) and _widening_helper(index, facts, parent):
            return True
        node = parent
    if not isinstance(parent, cst.Assign) or fn is None:
        return False
    targets = {t.target.value for t in parent.targets if isinstance(t.target, cst.Name)}
    for name in targets:
        for value in fn.assignments.get(name, []):
            if isinstance(value, cst.Call) and not (facts.canonical(value.func) or "").startswith("torch.") \
                    and any(isinstance(a.value, cst.Name) and a.value.value == name for a in value.args):
                return True
    return False


def _widening_helper(index: rp.RopeIndex, facts, call: cst.Call) -> bool:
    """``_rope_layout(angles.sin(), rotate_half=True)`` (timm): cos/sin handed to a helper of
    the file that does not rotate with them, so it lays them out. A helper that applies
    ``x * cos + rot(x) * sin`` itself, or one imported, may be where an unwidened cos lands."""
    name = call.func.value if isinstance(call.func, cst.Name) else self_attribute(call.func)
    if name is None or (facts.canonical(call.func) or "").startswith("torch."):
        return False
    helpers = [f for f in facts.iter_functions() if f.name == name]
    if not helpers:
        return False  # imported: it may be the rotation itself
    inside = {id(n) for f in helpers for n in index.nodes_in(f)}
    return not any(id(a.node) in inside for a in index.applications)


def _half_width(facts, source: cst.BaseExpression) -> bool:
    """``outer(t, inv_freq)``, ``einsum("i,j->ij", t, inv_freq)`` or ``t[:, None] * inv_freq``."""
    if isinstance(source, cst.Call):
        return facts.canonical(source.func) in _HALF_WIDTH_SOURCES or rp.last_name(source.func) == "outer"
    if isinstance(source, cst.BinaryOperation) and isinstance(source.operator, cst.Multiply):
        return "freq" in rp.code(facts, source)
    return False



def _odd_value(width: cst.BaseExpression, fn, depth: int = 0) -> int | None:
    """The odd integer ``width`` holds, when the code says so: a literal, a literal product
    truncated (``int(64 * 0.3)``), or a parameter whose default is one of these, followed through
    names and ``self.`` attributes (set in ``__init__``)."""
    literal = _literal_width(width)
    if literal is not None or depth > 3 or fn is None:
        return literal if literal is not None and literal % 2 == 1 else None
    if type(width) is cst.Name:
        candidates = list(fn.assignments.get(width.value, [])) or [
            p.default for p in fn.node.params.params if p.name.value == width.value and p.default is not None
        ]
        where = fn
    else:
        attr = self_attribute(width)
        candidates = list(fn.owner.attributes.get(attr, [])) if attr and fn.owner is not None else []
        where = fn.owner.methods.get("__init__") if fn.owner is not None else None
    values = {_odd_value(c, where, depth + 1) for c in candidates}
    return values.pop() if len(values) == 1 else None


def _literal_width(node: cst.BaseExpression) -> int | None:
    if type(node) is cst.Integer:
        return integer_value(node, bound=1 << 20)
    if type(node) is cst.Call and type(node.func) is cst.Name and node.func.value == "int" and node.args:
        inner = node.args[0].value
        if type(inner) is cst.BinaryOperation and type(inner.operator) is cst.Multiply:
            left, right = (_number(side) for side in (inner.left, inner.right))
            if left is not None and right is not None:
                return int(left * right)
    return None


def _number(node: cst.BaseExpression) -> float | None:
    return number_value(node) if type(node) in (cst.Integer, cst.Float) else None  # type: ignore[arg-type]
