"""ATT304 mask-polarity: the code blocks the opposite mask values from the ones documented."""

from __future__ import annotations

import re
from functools import cached_property

import libcst as cst
from libcst.metadata import PositionProvider

from attncheck.line_table import OTHER_BREAKS, split_lines
from attncheck.mask_wording import declared_blocked
from attncheck.static.analysis.patterns import (
    Polarity,
    argument,
    fill_site,
    is_blocking_value,
    is_mask_shaping,
    selected_polarity,
    tracer,
)
from attncheck.static.context import FileContext
from attncheck.static.facts import FunctionFacts
from attncheck.static.rule import Invalid, Rule

# A comment: from a line's first # to the end of the line, at any line break Python knows.
_COMMENT = re.compile(f"#([^\n{OTHER_BREAKS}]*)")
_CONCATS = frozenset({"torch.cat", "torch.concat", "torch.concatenate"})


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
    )

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self.tracer = tracer(context)

    def visit_Call(self, node: cst.Call) -> None:
        facts = self.context.facts
        site = fill_site(node, facts)
        fn = self.context.function
        if site is None or fn is None or not is_blocking_value(site.value, facts):
            return
        found = self._blocked_values(site.mask, fn)
        if found is None:
            return
        mask_name, blocked = found
        if not site.mask_blocks:
            blocked = "zeros" if blocked == "ones" else "ones"
        documented, where = self._documented(node, fn, mask_name)
        if documented is None or documented == blocked:
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
                stepped = (self._concatenated_mask(stepped[0]), stepped[1])
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
