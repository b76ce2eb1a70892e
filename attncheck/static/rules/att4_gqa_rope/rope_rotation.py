"""ATT402 rope-rotation: the rotary embedding rotates the wrong way or the wrong pairs.

Three families, each judged on the whole file (``rope.rope_index``):
the sign of the rotation (``rotate_half`` and the ``+``/``-`` that applies it
must multiply to the standard ``(-x2, x1)`` with ``+``), the layout (a
half-split rotation with interleaved cos/sin, or the reverse), and the
inverse frequencies ``1 / base ** (arange(0, d, 2) / d)``.
"""

from __future__ import annotations

import re

import libcst as cst

from attncheck.findings import Severity
from attncheck.static.analysis import rope as rp
from attncheck.static.facts import integer_value
from attncheck.static.rule import Invalid, Rule
from attncheck.static.tree import subtree

# NanoChat's rotate_half: "Rotates half the hidden dims of the input with flipped signs".
_DOCUMENTED_FLIP = re.compile(r"flip|sign|negat|clockwise|opposite", re.I)
_COUNTS_FREQUENCIES = re.compile(r"half|pair|freq", re.I)
_ROTATION_WORDS = re.compile(r"rotat|interleav|every_two|rope|neox|gptj", re.I)
_TUPLE_CONDITION = re.compile(r"if\s*\([^()\n]*,\s*\)\s*:")  # a literal first: the scan skips ahead

_HF = """
import torch

def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)

def apply_rotary_pos_emb(q, k, cos, sin):
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

def rope_cache(head_dim, seq_len, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.outer(torch.arange(seq_len).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()
"""

_GPTJ = """
import torch

def rotate_every_two(x):
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)

def apply_rotary_pos_emb(x, sin, cos):
    sin = sin.repeat_interleave(2, dim=-1)
    cos = cos.repeat_interleave(2, dim=-1)
    return (x * cos) + (rotate_every_two(x) * sin)
"""

_META = """
import torch

def precompute_freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    return torch.polar(torch.ones_like(freqs), torch.outer(t, freqs).float())

def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    return torch.view_as_real(xq_ * freqs_cis).flatten(3), torch.view_as_real(xk_ * freqs_cis).flatten(3)
"""

_FLIPPED = """
import torch

def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((x2, -x1), dim=-1)

def apply_rotary_pos_emb(q, k, cos, sin):
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
"""


class RopeRotation(Rule):
    code = "ATT402"
    PREFILTER = ("rotate", "rotary", "rope", "RoPE", "cos", "inv_freq", "arange")
    VALID = (
        # diffusers' Stable Audio 3: halves by unflatten and unbind, concatenated as halves.
        "import torch\ndef _rotate_half(x):\n    x = x.unflatten(-1, (2, -1))\n    x1, x2 = x.unbind(-2)\n"
        "    return torch.cat((-x2, x1), dim=-1)",
        _HF,
        _GPTJ,
        _META,
        # Ernie 4.5: GLM's rotate_half (interleaved) imported under the usual name.
        "import torch\nfrom ..glm.modeling_glm import rotate_half\n"
        "def apply(q, cos, sin):\n    cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)\n"
        "    sin = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1)\n"
        "    return (q.float() * cos) + (rotate_half(q).float() * sin)\n",
        # Ernie 4.5 VL: interleaved pairs for text (cast after the rotation), half-split for vision.
        "import torch\n"
        "def rotate_half_text(x):\n    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)\n"
        "def rotate_half(x):\n    h = x.shape[-1] // 2\n    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)\n"
        "def widen(freqs):\n    return freqs.repeat_interleave(2, dim=-1)\n"
        "def apply_text(q, cos, sin):\n    return q.float() * cos + rotate_half_text(q).float() * sin\n"
        "def apply_vision(q, cos, sin):\n    return q * cos + rotate_half(q) * sin\n",
        # rotate_half written the other way round, compensated by the minus.
        _FLIPPED.replace("q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin",
                         "q * cos - rotate_half(q) * sin, k * cos - rotate_half(k) * sin"),
        # partial rotary: only the first rotary_dim dims rotate.
        """
        import torch
        from transformers.models.llama.modeling_llama import rotate_half

        def apply_partial(q, cos, sin, rotary_dim):
            q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
            q_rot = q_rot * cos + rotate_half(q_rot) * sin
            return torch.cat((q_rot, q_pass), dim=-1)
        """,
        # the rotary inverse frequency as a negative power, and as a later division.
        """
        import torch

        def rope_freqs(dim, base=10000):
            inv_freq = base ** (-torch.arange(0, dim, 2).float() / dim)
            return inv_freq

        def rope_angles(t, dim, base=10000):
            div = base ** (torch.arange(0, dim, 2).float() / dim)
            return t[:, None] / div[None, :]
        """,
        # PoPE (x-transformers' PolarEmbedding, next to its RoPE): one frequency per dim.
        """
        import torch
        import torch.nn as nn

        class PolarEmbedding(nn.Module):
            def __init__(self, dim, base=10000):
                super().__init__()
                self.register_buffer("inv_freq", 1. / (base ** (torch.arange(0, dim).float() / dim)))

        def apply_rotary_pos_emb(t, freqs):
            return t * freqs.cos() + rotate_half(t) * freqs.sin()
        """,
        # the arange counts frequency pairs, not dims (ESMFold2's atom RoPE).
        """
        import torch

        def rotary_inv_freq(base, num_pairs):
            return 1.0 / (base ** (torch.arange(0, num_pairs).float() / num_pairs))
        """,
        # sinusoidal absolute encodings are not RoPE and are not judged here.
        "div = 10000 ** (torch.arange(0, 64, 2) / 64)\n",
        # the division as a method (Qwen-Image 2.1's rope_params).
        """
        import torch

        def rope_params(index, dim, theta=10000):
            freqs = torch.outer(index, 1.0 / torch.pow(theta, torch.arange(0, dim, 2).to(torch.float32).div(dim)))
            return torch.polar(torch.ones_like(freqs), freqs)
        """,
    )
    INVALID = (
        Invalid(  # a one-element tuple is always true
            "def apply(q, cos, sin, interleaved):\n    if (interleaved,):\n        rot = rotate_every_two\n"
            "    else:\n        rot = rotate_half\n    return q * cos + rot(q) * sin",
            line=2,
            message="always true",
        ),
        Invalid(  # the even and odd dims, concatenated as halves
            "import torch\ndef rotate_half(x):\n    x1, x2 = x[..., ::2], x[..., 1::2]\n"
            "    return torch.cat((-x2, x1), dim=-1)",
            line=4,
            message="joins them another",
        ),
        Invalid(_FLIPPED, line=7, message="cat((x2, -x1))", severity=Severity.ERROR),
        Invalid(_FLIPPED.replace('    x1 = x[..., : x.shape[-1] // 2]',
                                 '    """Rotates half the hidden dims with flipped signs (NanoChat)."""\n'
                                 '    x1 = x[..., : x.shape[-1] // 2]'),
                line=8, message="documented as intended", severity=Severity.WARNING),
        Invalid(_HF.replace("q * cos + rotate_half(q) * sin", "q * cos - rotate_half(q) * sin"),
                line=9, message="rotates by -θ"),
        Invalid(_HF.replace("torch.cat((freqs, freqs), dim=-1)", "freqs.repeat_interleave(2, dim=-1)"),
                line=14, message="interleaved"),
        Invalid(_HF.replace("emb = torch.cat((freqs, freqs), dim=-1)",
                            "emb = torch.stack((freqs, freqs), dim=-1).flatten(-2)"), line=14),
        Invalid(_GPTJ.replace("sin = sin.repeat_interleave(2, dim=-1)",
                              "sin = torch.cat([sin, sin], dim=-1)"),
                line=10, message="half-split"),
        Invalid(_HF.replace("1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))",
                            "base ** (torch.arange(0, head_dim, 2).float() / head_dim)"),
                line=12, message="reciprocal"),
        Invalid(_HF.replace("torch.arange(0, head_dim, 2).float()", "torch.arange(0, head_dim).float()"),
                line=12, message="step"),
        Invalid(_HF.replace("torch.arange(0, head_dim, 2).float() / head_dim",
                            "torch.arange(0, head_dim, 2).float()"),
                line=12, message="divided"),
        Invalid(_HF.replace("base ** (", "base * ("), line=12, message="multiplied"),
    )

    def visit_Call(self, node: cst.Call) -> None:
        if rp.crossed_rotation(self.context.facts, node, self.context.function):
            joined = "concatenated as halves" if rp.last_name(node.func) != "stack" else "stacked as pairs"
            self.report(
                node,
                f"the rotation takes its two parts one way and joins them another ({joined}): dim 2i's "
                "partner is written at i + d/2 (or the reverse), so x * cos + rot(x) * sin rotates no pair",
                hint="pair the even and odd dims with torch.stack((-x2, x1), dim=-1).flatten(-2), "
                "or split halves (x[..., :d//2], x[..., d//2:]) and join them with torch.cat((-x2, x1), dim=-1)",
            )

    def _check_tuple_conditions(self, module: cst.Module) -> None:
        """``if (interleaved,):`` — a one-element tuple, true whatever the flag holds — choosing the
        rotation convention: the other convention is never used. Looked for in the text first
        (an ``if`` is no event of the fast walk, and almost no file has one)."""
        text = self.context.source.text
        if (",)" not in text and ", )" not in text) or not _TUPLE_CONDITION.search(text):
            return
        for node in subtree.preorder(module):
            if type(node) is not cst.If or type(node.test) is not cst.Tuple or not node.test.elements:
                continue
            if not _ROTATION_WORDS.search(self.context.module.code_for_node(node)):
                continue
            shown = self.context.module.code_for_node(node.test)
            self.report(
                node.test,
                f"`if {shown}:` tests a non-empty tuple, which is always true: the rotation convention of "
                "the else branch is never used, whatever the flag says",
                hint=f"test the flag itself: if {self.context.module.code_for_node(node.test.elements[0].value)}:",
            )

    def visit_Module(self, node: cst.Module) -> None:
        self._check_tuple_conditions(node)
        index = rp.rope_index(self.context)
        self._check_signs(index)
        self._check_layouts(index)
        if (index.powers or index.base_products) and index.is_rope_file(self.context.source.text):
            for power in index.powers:
                self._check_power(index, power)
            for product in index.base_products:
                self.report(
                    product,
                    "the RoPE base is multiplied in (10000 * i/d) instead of raised to a power: "
                    "the inverse frequencies must be base ** (-2i/d)",
                    hint="inv_freq = 1.0 / (base ** (torch.arange(0, d, 2).float() / d))",
                )

    def _check_signs(self, index: rp.RopeIndex) -> None:
        reported: set[int] = set()
        applied: set[int] = set()
        for application in index.applications:
            rotation = application.rotation
            if rotation is not None:
                applied.add(id(rotation.node))
            if application.sign > 0:
                continue
            if rotation is not None and rotation.sign < 0:
                if id(rotation.node) not in reported:
                    reported.add(id(rotation.node))
                    self._report_flipped(index, rotation)
                continue
            self.report(
                application.node,
                "q * cos - rotate_half(q) * sin with the standard rotate_half (cat((-x2, x1))) "
                "rotates by -θ: the rotary embedding is x * cos + rotate_half(x) * sin",
                hint="use + between the cos and sin terms",
            )
        for rotation in index.rotations.values():
            if rotation.sign < 0 and id(rotation.node) not in applied | reported:
                self._report_flipped(index, rotation)

    def _report_flipped(self, index: rp.RopeIndex, rotation: rp.Rotation) -> None:
        shown = "cat((x2, -x1))" if rotation.layout == rp.HALF else "stack((x2, -x1), -1)"
        fn = index.scope(rotation.node)
        documented = fn is not None and bool(_DOCUMENTED_FLIP.search(fn.node.get_docstring() or ""))
        self.report(
            rotation.node,
            f"the rotation returns {shown}, the negation of the standard (-x2, x1): "
            "with x * cos + rot(x) * sin it rotates by -θ"
            + (" (documented as intended: consistent on q and k it keeps relative positions, "
               "but it only matches checkpoints trained with the same convention)" if documented else ""),
            severity=Severity.WARNING if documented else None,
            by_design=documented,
            hint="return torch.cat((-x2, x1), dim=-1)" if rotation.layout == rp.HALF
            else "return torch.stack((-x2, x1), dim=-1).flatten(-2)",
        )

    def _check_layouts(self, index: rp.RopeIndex) -> None:
        layouts = index.layouts()
        if len(layouts) != 1 or any(a.imported for a in index.applications):
            return  # mixed, or a helper imported under a usual name whose layout is only assumed
        (layout,) = layouts
        if any(w.undone is not None and w.layout == layout for w in index.widenings):
            return  # the other layout's cache is re-widened to this one before the rotation
        for widening in index.widenings:
            if widening.layout == layout:
                continue
            if layout == rp.HALF:
                message = ("cos/sin are widened interleaved (each frequency twice in a row) but "
                           "rotate_half pairs dim i with dim i + d/2: build them with "
                           "cat((freqs, freqs), -1)")
            else:
                message = ("cos/sin are widened half-split (cat((freqs, freqs))) but the rotation "
                           "pairs dims 2i and 2i+1: build them with repeat_interleave(2, dim=-1)")
            self.report(widening.node, message)

    def _check_power(self, index: rp.RopeIndex, power: rp.FrequencyPower) -> None:
        facts, fn = self.context.facts, index.scope(power.node)
        negative = any(
            isinstance(n, cst.UnaryOperation) and isinstance(n.operator, cst.Minus)
            for n in subtree.preorder(power.exponent)
        )
        if not negative and not _reciprocal(index, power):
            self.report(
                power.node,
                "the inverse frequencies are base ** (2i/d) with no reciprocal: they grow "
                "instead of shrinking, so high dims spin fastest",
                hint="inv_freq = 1.0 / (base ** (torch.arange(0, d, 2).float() / d))",
            )
            return
        if not any(_divides(n) for n in subtree.preorder(power.exponent)):
            self.report(
                power.node,
                "the exponent arange(0, d, 2) is not divided by d: the frequencies underflow "
                "to 0 after the first few pairs",
                hint="base ** (torch.arange(0, d, 2).float() / d)",
            )
            return
        if _step_missing(facts, power, fn) and _rotary_scope(index, power):
            self.report(
                power.node,
                "arange(0, d) without step 2 gives d frequencies instead of d/2, with exponents i/d "
                "instead of 2i/d",
                hint="torch.arange(0, d, 2)",
            )


def _divides(node: cst.CSTNode) -> bool:
    """``a / d``, ``a.div(d)`` or ``torch.div(a, d)`` (Qwen-Image's ``arange(0, dim, 2).div(dim)``)."""
    if isinstance(node, cst.BinaryOperation):
        return isinstance(node.operator, cst.Divide)
    if isinstance(node, cst.Call):
        return rp.last_name(node.func) in {"div", "divide", "true_divide"}
    return False


# Methods that convert a tensor without changing what it holds.
_VALUE_KEEPING = frozenset(
    {"to", "float", "double", "half", "bfloat16", "type", "type_as", "cuda", "cpu", "contiguous"}
)


def _reciprocal(index: rp.RopeIndex, power: rp.FrequencyPower) -> bool:
    """``1 / base ** e``, ``base ** e`` bound to a name later divided by, or ``.reciprocal()``,
    through conversions that keep the values (``1. / (base ** e).to(device)``)."""
    node, parent = power.node, index.parent(power.node)
    while (
        isinstance(parent, cst.Attribute)
        and parent.attr.value in _VALUE_KEEPING
        and isinstance(call := index.parent(parent), cst.Call)
        and call.func is parent
    ):
        node, parent = call, index.parent(call)
    if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.Divide):
        return parent.right is node
    if isinstance(parent, cst.Attribute) and parent.attr.value == "reciprocal":
        return True
    if isinstance(parent, cst.Arg) and isinstance(index.parent(parent), cst.Call):
        return rp.last_name(index.parent(parent).func) == "reciprocal"  # type: ignore[union-attr]
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        target = cst.Module([]).code_for_node(parent.targets[0].target)
        return target in index.divisors
    return False


def _rotary_scope(index: rp.RopeIndex, power: rp.FrequencyPower) -> bool:
    """The top-level class or function computing the frequencies is a rotary embedding: it
    says so (rotary, rope, rotate) or widens them to pairs. One frequency per dim is right
    elsewhere: PoPE (x-transformers' PolarEmbedding) gives each dim its own angle."""
    scope, node = None, power.node
    while (node := index.parent(node)) is not None:
        if isinstance(node, (cst.ClassDef, cst.FunctionDef)):
            scope = node
    if scope is None:
        return True
    if rp.ROPE_WORDS.search(scope.name.value) or rp.ROPE_WORDS.search(scope.get_docstring() or ""):
        return True
    inside = {id(n) for n in subtree.preorder(scope)}
    return any(id(w.node) in inside for w in index.widenings)


def _step_missing(facts, power: rp.FrequencyPower, fn) -> bool:
    arange = power.arange
    positional = [a for a in arange.args if a.keyword is None]
    if len(positional) >= 3 or any(a.keyword and a.keyword.value == "step" for a in arange.args):
        return False
    end = positional[-1].value if positional else None
    # ``arange(0, num_pairs) / num_pairs`` counts the frequencies, not the dims (ESMFold2).
    if end is None or rp.is_half_of(facts, end, fn) or _COUNTS_FREQUENCIES.search(rp.last_name(end) or ""):
        return False
    # ``arange(d // 2) * 2 / d`` spells the step as a factor.
    return not any(
        isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Multiply)
        and (integer_value(n.left) == 2 or integer_value(n.right) == 2)
        for n in subtree.preorder(power.exponent)
    )
