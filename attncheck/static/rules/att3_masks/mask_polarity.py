"""ATT304 mask-polarity: the code blocks the opposite mask values from the ones documented."""

from __future__ import annotations

import re
from functools import cached_property

import libcst as cst
from libcst.metadata import PositionProvider

from attncheck.line_table import OTHER_BREAKS, split_lines
from attncheck.mask_wording import declared_blocked
from attncheck.static.analysis import semantics
from attncheck.static.analysis.patterns import (
    FillSite,
    Polarity,
    argument,
    fill_site,
    is_blocking_value,
    is_mask_shaping,
    literal_value,
    method_name,
    selected_polarity,
    tracer,
)
from attncheck.static.analysis.syntax import is_sdpa_call
from attncheck.static.context import FileContext
from attncheck.static.facts import FunctionFacts
from attncheck.static.rule import Invalid, Rule

# A comment: from a line's first # to the end of the line, at any line break Python knows.
_COMMENT = re.compile(f"#([^\n{OTHER_BREAKS}]*)")
_CONCATS = frozenset({"torch.cat", "torch.concat", "torch.concatenate"})
_TRIANGLES = frozenset({"torch.tril", "torch.triu"})



class MaskPolarity(Rule):
    code = "ATT304"
    PREFILTER = ("mask",)
    VALID = (
        "def f(s, mask):\n    # mask: 1 for tokens to attend, 0 for padding\n"
        "    return s.masked_fill(mask == 0, -1e4)",
        "def f(s, mask):\n    # True means masked\n    return s.masked_fill(mask, -1e4)",
        "def f(s, mask):\n    # mask 中 0 表示需要屏蔽的位置\n    return s.masked_fill(mask == 0, -1e4)",
        'def f(s, attention_mask):\n    """attention_mask: 1 for tokens that are not masked, '
        '0 for tokens that are masked."""\n'
        "    return torch.where(attention_mask.bool(), s, -1e4)",
        # BROS: the mask is inverted inside the concatenation that pads it with a column.
        'def f(logits, bbox_first_token_mask, b):\n    """bbox_first_token_mask: 1 for first tokens, '
        '0 for tokens that are masked."""\n'
        "    bbox_first_token_mask = torch.cat([~bbox_first_token_mask, torch.zeros([b, 1], dtype=torch.bool)], 1)\n"
        "    return logits.masked_fill(bbox_first_token_mask[:, None, :], -1e4)",
        # Block masks joined with |; complementary masks in branches with their own softmax.
        'def f(s, t, key_padding_mask):\n    """key_padding_mask: True for padding."""\n'
        "    future = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)\n"
        "    return s.masked_fill(key_padding_mask[:, None, :] | future, -1e4).softmax(-1)",
        "def f(s, v, window):\n    a = s.masked_fill(~window, -1e4).softmax(-1) @ v\n"
        "    return a + s.masked_fill(window, -1e4).softmax(-1) @ v",
        # SDPA's bool attn_mask attends where True.
        "def f(q, k, v, mask):\n    # mask: 1 for tokens to attend, 0 for padding\n"
        "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.bool())",
    )
    INVALID = (
        Invalid(
            "def f(s, mask):\n    # mask 中 True/1 表示需要屏蔽的位置\n"
            "    return s.masked_fill(mask == 0, float('-inf'))",
            line=3,
            message="blocks the zeros",
        ),
        Invalid(
            "def f(s, mask):\n    # 1 for tokens to attend\n    return s.masked_fill(mask, -1e4)", line=3
        ),
        Invalid(
            'def f(s, key_padding_mask):\n    """key_padding_mask: True = padding (ignored)."""\n'
            "    return torch.where(key_padding_mask, s, -1e4)",
            line=3,
        ),
        Invalid(
            'class A:\n    def forward(self, x, mask=None):\n        """\n        Args:\n'
            '            mask: 0 表示屏蔽\n        """\n        m = mask.unsqueeze(1)\n'
            "        return x.masked_fill(m.bool(), -1e4)",
            line=8,
        ),
        Invalid(
            'def f(s, mask, b):\n    """mask: 1 for tokens to attend, 0 for padding."""\n'
            "    mask = torch.cat([mask, torch.zeros([b, 1], dtype=torch.bool)], 1)\n"
            "    return s.masked_fill(mask, -1e4)",
            line=4,
        ),
        Invalid(
            'def f(s, t, key_padding_mask):\n    """key_padding_mask: True for padding."""\n'
            "    past = torch.tril(torch.ones(t, t, dtype=torch.bool))\n"
            "    return s.masked_fill(key_padding_mask[:, None, :] | past, -1e4).softmax(-1)",
            line=4,
            message="two conventions",
        ),
        Invalid(
            "def f(s, r, mask):\n    s = s.masked_fill(~mask, -1e4)\n    r = r.masked_fill(mask, -1e4)\n"
            "    return (s + r).softmax(-1)",
            line=3,
            message="two conventions",
        ),
        Invalid(
            "def f(q, k, v, mask):\n    # mask: 1 for tokens to attend, 0 for padding\n"
            "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask == 0)",
            line=3,
            message="attends where True",
        ),
    )

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self.tracer = tracer(context)
        self._fills: dict[int, list[tuple[cst.Call, str, Polarity]]] = {}  # blocking fills, by function
        self._combinations: set[int] = set()

    def visit_Call(self, node: cst.Call) -> None:
        facts = self.context.facts
        site = fill_site(node, facts)
        fn = self.context.function
        if site is None and fn is not None and is_sdpa_call(self.context, node):
            self._judge_sdpa_mask(node, fn)
        if site is None or fn is None or not is_blocking_value(site.value, facts):
            return
        self._judge_combination(site, fn)
        found = self._blocked_values(site.mask, fn)
        if found is None:
            return
        mask_name, blocked = found
        if not site.mask_blocks:
            blocked = "zeros" if blocked == "ones" else "ones"
        documented, where = self._documented(node, fn, mask_name)
        if documented is None or documented == blocked:
            self._judge_mixed_fills(node, fn, mask_name, blocked)
            return
        code_text = self.context.module.code_for_node(site.mask)
        said = "1/True" if documented == "ones" else "0/False"
        self.report(
            node,
            f"the {where} says {said} in `{mask_name}` marks blocked positions, but `{code_text}` "
            f"blocks the {blocked} of `{mask_name}`: the code keeps exactly the keys it should drop",
            hint=f"make the code and the {where} agree: "
            + (
                "block with masked_fill(mask.bool(), ...)"
                if documented == "ones"
                else "block with masked_fill(mask == 0, ...)"
            ),
            evidence=[f"{where}: {said} = blocked", f"code: `{code_text}` blocks the {blocked}"],
        )

    def _judge_sdpa_mask(self, node: cst.Call, fn: FunctionFacts) -> None:
        """SDPA's bool ``attn_mask`` keeps where True. A mask turned bool here (``mask == 0``,
        ``~mask``, ``mask.bool()``) whose ones or zeros the code's own comment or docstring calls
        blocked, handed over so that SDPA keeps exactly those, attends to the padding."""
        mask = argument(node, 3, "attn_mask")
        if mask is None or not self._made_bool(mask, fn):
            return
        found = self._blocked_values(mask, fn)
        if found is None:
            return
        mask_name, kept = found
        documented, where = self._documented(node, fn, mask_name)
        stepped = self.tracer.step(mask, fn) if type(mask) is cst.Name else None
        if documented is None and stepped is not None:  # the comment above the conversion
            documented, where = self._documented(stepped[0], fn, mask_name)
        if documented is None or documented != kept:
            return
        shown = self.context.module.code_for_node(mask)
        said = "1/True" if documented == "ones" else "0/False"
        self.report(
            mask,
            f"the {where} says {said} in `{mask_name}` marks blocked positions, but `{shown}` is True there, "
            "and scaled_dot_product_attention's bool attn_mask attends where True: the blocked keys are "
            "the only ones kept",
            hint="SDPA wants True = attend: pass "
            + ("~mask (or mask == 0)" if documented == "ones" else "mask.bool() (or mask != 0)"),
            evidence=[f"{where}: {said} = blocked", f"SDPA keeps the {kept} of `{mask_name}`"],
        )

    def _made_bool(self, mask: cst.BaseExpression, fn: FunctionFacts) -> bool:
        """Whether the mask expression, followed back through its names and reshapes, is made
        bool by a comparison, ``~``, ``logical_not`` or ``.bool()`` (a float mask would be added)."""
        expr: cst.BaseExpression | None = mask
        for _ in range(6):
            if type(expr) is cst.Comparison or (
                type(expr) is cst.UnaryOperation and type(expr.operator) is cst.BitInvert
            ):
                return True
            if type(expr) is cst.Call and method_name(expr) in ("bool", "logical_not", "eq", "ne"):
                return True
            if type(expr) is cst.Subscript:
                expr = expr.value
            elif type(expr) is cst.Call and is_mask_shaping(expr) and type(expr.func) is cst.Attribute:
                expr = expr.func.value
            else:
                stepped = self.tracer.step(expr, fn) if type(expr) is cst.Name else None
                if stepped is None:
                    return False
                expr = stepped[0]
        return False

    def _judge_mixed_fills(self, node: cst.Call, fn: FunctionFacts, mask_name: str, blocked: Polarity) -> None:
        """One mask blocking its ones in one fill and its zeros in another (``masked_fill(~mask)``
        and ``masked_fill(mask)``), both feeding the same softmax: one of the two keeps exactly
        the keys it should drop. Fills feeding different softmaxes may be deliberate complements
        (a local and a global branch)."""
        earlier = self._fills.setdefault(id(fn), [])
        for other, name, other_blocked in earlier:
            if name == mask_name and other_blocked != blocked and self._one_softmax_reads(fn, other, node):
                shown = self.context.module.code_for_node
                self.report(
                    node,
                    f"`{mask_name}` blocks its {blocked} here (`{shown(node)}`) but its {other_blocked} in "
                    f"`{shown(other)}`, and both feed one softmax: one mask, two conventions",
                    hint=f"decide whether 1/True in `{mask_name}` means keep or blocked, and spell both "
                    "fills the same way (masked_fill(mask == 0, ...) for a keep mask)",
                    evidence=[f"{shown(other)} blocks the {other_blocked}", f"{shown(node)} blocks the {blocked}"],
                )
                return
        earlier.append((node, mask_name, blocked))

    def _one_softmax_reads(self, fn: FunctionFacts, first: cst.Call, second: cst.Call) -> bool:
        sem = semantics.of(self.context)
        for call in fn.calls:
            softmax = sem.softmax(call, fn)
            if softmax is not None and all(self.tracer.reads(softmax.input, fill, fn) for fill in (first, second)):
                return True
        return False

    def _judge_combination(self, site: FillSite, fn: FunctionFacts) -> None:
        """``blocked = padding | causal`` (or ``keep = mask & causal``) blocked in one fill: the two
        masks must share a convention. A keep mask (``tril``, one documented 1 = attend) joined
        with a block mask (``triu(..., diagonal=1)``, one documented True = padding) keeps the
        blocked positions of one of them and blocks the kept ones."""
        combined, combined_fn = self._join_behind(site.mask, fn)
        if combined is None or combined_fn is None or id(combined) in self._combinations:
            return
        self._combinations.add(id(combined))
        sides = [(side, self._side_blocks(side, combined_fn, combined)) for side in (combined.left, combined.right)]
        known = [(side, said) for side, said in sides if said is not None]
        if len(known) != 2 or known[0][1][0] == known[1][1][0]:
            return
        shown = self.context.module.code_for_node
        meaning = {"ones": "1/True means blocked", "zeros": "1/True means kept"}
        self.report(
            combined,
            f"`{shown(combined)}` joins masks of two conventions: in `{shown(known[0][0])}` "
            f"{meaning[known[0][1][0]]}, in `{shown(known[1][0])}` {meaning[known[1][1][0]]}",
            hint="bring both to one convention before joining them: block masks join with |, keep masks "
            "with &, and ~ turns one into the other",
            evidence=[f"`{shown(side)}` {said[1]}" for side, said in known],
        )

    def _join_behind(
        self, mask: cst.BaseExpression, fn: FunctionFacts
    ) -> tuple[cst.BinaryOperation | None, FunctionFacts | None]:
        """The ``a | b`` or ``a & b`` a fill's mask comes from, through names, ``~`` and reshapes."""
        node: cst.BaseExpression = mask
        where: FunctionFacts | None = fn
        for _ in range(6):
            if type(node) is cst.BinaryOperation:
                return (node, where) if type(node.operator) in (cst.BitOr, cst.BitAnd) else (None, None)
            found = selected_polarity(node)
            if found is None:
                return None, None
            stepped = self.tracer.step(found[0], where) if type(found[0]) is cst.Name else None
            if stepped is None:
                return None, None
            node, where = stepped
        return None, None

    def _side_blocks(
        self, side: cst.BaseExpression, fn: FunctionFacts, combined: cst.CSTNode
    ) -> tuple[Polarity, str] | None:
        """Which values of ``side`` (as it is used in the join) mean blocked, and why: a causal
        triangle, or a mask whose docstring or comment states its convention."""
        flipped, node, where = False, side, fn
        for _ in range(6):
            found = selected_polarity(node)
            if found is None:
                return None
            node, polarity = found
            flipped ^= polarity == "zeros"
            said = self._triangle_blocks(node) or self._documented_side(node, fn, combined)
            if said is not None:
                blocked, why = said
                return ("zeros" if blocked == "ones" else "ones") if flipped else blocked, why
            stepped = self.tracer.step(node, where) if type(node) is cst.Name else None
            if stepped is None or stepped[1] is None:
                return None
            node, where = stepped
        return None

    def _triangle_blocks(self, node: cst.BaseExpression) -> tuple[Polarity, str] | None:
        """``tril(ones)`` keeps its ones (the past); ``triu(ones, diagonal=1)`` blocks them (the future)."""
        if type(node) is not cst.Call:
            return None
        canonical = self.context.facts.canonical(node.func) or ""
        if canonical in _TRIANGLES:
            name, diagonal = canonical[len("torch.") :], argument(node, 1, "diagonal")
        elif method_name(node) in ("tril", "triu", "tril_", "triu_") and canonical not in _TRIANGLES:
            name, diagonal = method_name(node) or "", argument(node, 0, "diagonal")
        else:
            return None
        if name in ("tril", "tril_"):
            return "zeros", "is a lower triangle (1 = the past, kept)"
        offset = literal_value(diagonal, self.context.facts) if diagonal is not None else None
        if name in ("triu", "triu_") and offset is not None and offset >= 1:
            return "ones", "is an upper triangle above the diagonal (1 = the future, blocked)"
        return None

    def _documented_side(
        self, node: cst.BaseExpression, fn: FunctionFacts, combined: cst.CSTNode
    ) -> tuple[Polarity, str] | None:
        if type(node) is not cst.Name or node.value not in fn.params:
            return None
        said, where = self._documented(combined, fn, node.value)
        if said is None:
            return None
        return said, f"is documented in the {where} with {'1/True' if said == 'ones' else '0/False'} = blocked"

    def _blocked_values(self, mask: cst.BaseExpression, fn: FunctionFacts) -> tuple[str, Polarity] | None:
        """The mask's name and which of its values the expression selects, across reassignments."""
        flipped = False
        current: tuple[cst.BaseExpression, FunctionFacts | None] = (mask, fn)
        for _ in range(6):
            found = selected_polarity(current[0])
            if found is None:
                return None
            underlying, polarity = found
            flipped ^= polarity == "zeros"
            stepped = self.tracer.step(underlying, current[1]) if isinstance(underlying, cst.Name) else None
            if stepped is not None:
                stepped = (_joined_mask(self._concatenated_mask(stepped[0])), stepped[1])
            if stepped is None or not _changes_nothing_or_polarity(stepped[0]):
                name = self.context.module.code_for_node(underlying)
                return name, "zeros" if flipped else "ones"
            current = stepped
        return None

    def _concatenated_mask(self, node: cst.BaseExpression) -> cst.BaseExpression:
        """The one mask among ``torch.cat([~mask, torch.zeros(...)])``'s pieces (the others are
        constant padding), so that its ``~`` counts; ``node`` itself otherwise."""
        if not isinstance(node, cst.Call) or self.context.facts.canonical(node.func) not in _CONCATS:
            return node
        pieces = argument(node, 0, "tensors")
        if not isinstance(pieces, (cst.List, cst.Tuple)):
            return node
        masks = [e.value for e in pieces.elements if _is_named_mask(e.value)]
        return masks[0] if len(masks) == 1 else node

    def _comment_entry(self, fn: FunctionFacts, name: str) -> str:
        """A comment of ``fn`` written as a parameter entry, ``# pad_mask: (b, s), True for padding``,
        wherever it stands in the function (often at the top of ``forward``, far from the fill)."""
        span = self.get_metadata(PositionProvider, fn.node)
        first, last = self.context.file_line(span.start.line), self.context.file_line(span.end.line)
        comments = (found[1].strip() for text in self.lines[first - 1 : last] for found in _COMMENT.finditer(text))
        return _parameter_doc("\n".join(comments), name)

    @cached_property
    def lines(self) -> list[str]:
        """The file's lines, split only for a file with a fill to judge (most have none)."""
        return split_lines(self.context.source.text)

    @cached_property
    def _comments_declare(self) -> bool:
        """Whether any comment of the file states a mask convention: a comment states one
        only if one of its lines does, so without such a line no position is needed. The
        comments are found in the text, without splitting the file into lines."""
        return any(declared_blocked(found[1]) is not None for found in _COMMENT.finditer(self.context.source.text))

    def _documented(self, node: cst.Call, fn: FunctionFacts, mask_name: str) -> tuple[Polarity | None, str]:
        if self._comments_declare:
            line = self.context.file_line(self.get_metadata(PositionProvider, node).start.line)
            said = declared_blocked(_comments_above(self.lines, line))
            if said is None:
                said = declared_blocked(self._comment_entry(fn, mask_name.rsplit(".", 1)[-1]))
            if said is not None:
                return said, "comment"
        for owner, where in (
            (fn.node, "docstring"),
            (fn.owner.node if fn.owner else None, "class docstring"),
        ):
            docstring = owner.get_docstring() if owner is not None else None
            if docstring:
                said = declared_blocked(_parameter_doc(docstring, mask_name.rsplit(".", 1)[-1]))
                if said is not None:
                    return said, where
        return None, ""


def _joined_mask(node: cst.BaseExpression) -> cst.BaseExpression:
    """The named mask of ``m | future`` or ``keep & causal`` (the left one if both are named):
    a join has the polarity of each of its sides, so ``m = pad_mask[:, None]; m = m | future``
    still blocks where ``pad_mask`` is True. ``node`` itself when it is no join."""
    if type(node) is not cst.BinaryOperation or type(node.operator) not in (cst.BitOr, cst.BitAnd):
        return node
    named = [side for side in (node.left, node.right) if _is_named_mask(side)]
    return named[0] if named else node


def _is_named_mask(node: cst.BaseExpression) -> bool:
    found = selected_polarity(node)
    return found is not None and isinstance(found[0], (cst.Name, cst.Attribute))


def _changes_nothing_or_polarity(node: cst.BaseExpression) -> bool:
    return selected_polarity(node) is not None and (is_mask_shaping(node) or not isinstance(node, cst.Call))


def _comments_above(lines: list[str], line: int, limit: int = 3) -> str:
    """The comment at the end of ``line`` and the comment lines right above it."""
    found = []
    current = lines[line - 1] if line - 1 < len(lines) else ""
    if "#" in current:
        found.append(current.split("#", 1)[1])
    index = line - 2
    while index >= 0 and len(found) <= limit and lines[index].strip().startswith("#"):
        found.append(lines[index].strip().lstrip("#"))
        index -= 1
    return "\n".join(found)


def _parameter_doc(docstring: str, name: str) -> str:
    """The lines of a docstring that describe parameter ``name`` (its entry and continuation)."""
    lines = docstring.splitlines()
    for index, text in enumerate(lines):
        stripped = text.strip()
        if stripped.startswith(name) and re.match(rf"{re.escape(name)}\b\s*(\(|:)", stripped):
            indent = len(text) - len(text.lstrip())
            entry = [stripped]
            for following in lines[index + 1 :]:
                if following.strip() and len(following) - len(following.lstrip()) <= indent:
                    break
                entry.append(following.strip())
            return "\n".join(entry)
    return ""
