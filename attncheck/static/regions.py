"""Keep only the parts of a large file that can hold attention code, before parsing.

libcst parses about 10-16k lines a second on one core, so parsing a 5,000-line
model file whole costs more than every rule together, and most of such a file is
embeddings, MLPs, heads, docstrings and comments. For files above
``MIN_LINES`` this module keeps:

- the module-level imports of names the kept code uses (rules resolve
  ``F.softmax`` through them),
- top-level functions and classes that contain attention code (``is_relevant``),
  and classes named as attention that delegate it (``Attention``, ``MHA``...),
- inside those classes, ``__init__``, the methods that contain attention code,
  and the methods that touch a module the constructor builds (a dropout applied
  in a helper is applied; a rule must not call it unused),
- small config classes (the target finder looks them up by name),

and drops every other line, including comment-only lines. ``Reduced.lines``
maps each kept line back to its line in the file, so findings point at the
user's real lines; columns are untouched because whole lines are dropped.

This is a text scan, not a parse, so a pathological file can fool it; the
engine then parses the whole file instead (see ``engine.parse``).
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass

MIN_LINES = 400
_STRONG = re.compile(
    r"scaled_dot_product|attention_interface|rotate_half|rotate_every_two|apply_rotary|repeat_kv"
    r"|baddbmm|inv_freq|cos_cached|softmax"
)
# Common outside attention too (losses, generation): relevant only next to a product.
_WEAK = re.compile(r"masked_fill|\.tril|\.triu")
_PRODUCT = re.compile(r"matmul|@|bmm|einsum")
_ATTENTION_CLASS = re.compile(r"\s*class\s+\w*(?:Attention|Attn|MHA|MultiHead)\w*\s*[(:]")
# ``self.name = Something(...)`` in a constructor: a module (or tensor) the class builds.
_BUILT = re.compile(r"self\.(\w+)\s*=\s*[\w.]+\(")
_WORD = re.compile(r"\w+")
_CONFIG_CLASS = re.compile(r"\s*class\s+\w*(?:Config|Args|Params|Settings|Options)\b")
_BLOCK_HEAD = re.compile(r"(?:class|def|async\s+def)\s|@")
_TRIPLE_QUOTE_OR_COMMENT = re.compile(r"(\"\"\"|''')|#")
SMALL_CONFIG_LINES = 40


@dataclass(frozen=True)
class Reduced:
    """The kept text, and for each of its lines the 1-based line in the original."""

    text: str
    lines: tuple[int, ...]

    def original_line(self, line: int) -> int:
        return self.lines[line - 1] if 0 < line <= len(self.lines) else line


def is_relevant(text: str) -> bool:
    """Whether a block's text contains the makings of attention."""
    return bool(_STRONG.search(text) or (_WEAK.search(text) and _PRODUCT.search(text)))


def attention_regions(text: str) -> Reduced | None:
    """The relevant part of ``text``, or None when the file is small enough to parse whole."""
    lines = text.splitlines(keepends=True)
    if len(lines) < MIN_LINES:
        return None
    keep = [False] * len(lines)
    imports: list[tuple[int, int]] = []
    for start, end in _statements(lines, 0, len(lines), ""):
        block = lines[start:end]
        head = _header_keyword(block)
        if not head:
            if any("import" in line for line in block):
                imports.append((start, end))
            continue
        text = "".join(block)
        if not is_relevant(text) and not (head == "class" and _ATTENTION_CLASS.match(_header_line(block))):
            if head == "class" and end - start <= SMALL_CONFIG_LINES and _is_config_class(block):
                _mark(keep, start, end)
            continue
        if head != "class":
            _mark(keep, start, end)
            continue
        _keep_relevant_members(lines, keep, start, end)
    used = set(_WORD.findall("".join(line for line, flag in zip(lines, keep, strict=True) if flag)))
    for start, end in imports:
        names = _bound_names(lines[start:end])
        if names is None or not names.isdisjoint(used):
            _mark(keep, start, end)
    kept = [index for index, flag in enumerate(keep) if flag and not _is_comment_only(lines[index])]
    if not kept:
        return Reduced("", ())
    return Reduced("".join(lines[i] for i in kept), tuple(i + 1 for i in kept))


def _keep_relevant_members(lines: list[str], keep: list[bool], start: int, end: int) -> None:
    indent = _body_indent(lines, start, end)
    if indent is None:
        _mark(keep, start, end)
        return
    body_start = start + 1
    members = _statements(lines, body_start, end, indent)
    header_end = members[0][0] if members else end
    _mark(keep, start, header_end)
    heads = [_header_keyword(lines[a:b]) for a, b in members]
    texts = ["".join(lines[a:b]) for a, b in members]
    constructors = [text for head, text in zip(heads, texts, strict=True) if head == "def __init__"]
    built = {name for text in constructors for name in _BUILT.findall(text)}
    uses_built = re.compile(rf"self\.(?:{'|'.join(map(re.escape, sorted(built)))})\b") if built else None
    kept_any = False
    for (member_start, member_end), head, text in zip(members, heads, texts, strict=True):
        if (
            head in ("class", "", "def __init__")
            or is_relevant(text)
            or (uses_built is not None and uses_built.search(text))
        ):
            _mark(keep, member_start, member_end)
            kept_any = True
    if not kept_any:
        _mark(keep, start, end)


def _mark(keep: list[bool], start: int, end: int) -> None:
    for index in range(start, end):
        keep[index] = True


def _is_comment_only(line: str) -> bool:
    return line.lstrip().startswith("#")


def _bound_names(block: list[str]) -> set[str] | None:
    """The names a block of plain imports binds; None (keep it) for a star import or a
    block that is more than imports (``try: import flash_attn`` ...)."""
    try:
        tree = ast.parse(textwrap.dedent("".join(block)))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    names: set[str] = set()
    for statement in tree.body:
        if not isinstance(statement, (ast.Import, ast.ImportFrom)):
            return None
        for alias in statement.names:
            if alias.name == "*":
                return None
            names.add(alias.asname or alias.name.split(".")[0])
    return names


def _is_config_class(block: list[str]) -> bool:
    return any(_CONFIG_CLASS.match(line) for line in block if not line.startswith("@"))


def _header_keyword(block: list[str]) -> str:
    """``class``, ``def __init__``, ``def``, or "" for a plain statement."""
    stripped = _header_line(block).lstrip()
    if stripped.startswith("class "):
        return "class"
    if re.match(r"(?:async\s+)?def\s+__init__\b", stripped):
        return "def __init__"
    if re.match(r"(?:async\s+)?def\s", stripped):
        return "def"
    return ""


def _header_line(block: list[str]) -> str:
    """The line that says what a block is: the first line at the block's own indentation
    that is not part of a decorator (multi-line decorators included)."""
    indent = block[0][: len(block[0]) - len(block[0].lstrip())]
    for line in block:
        if _at_level(line, indent) and not line.lstrip().startswith("@") and line.lstrip()[0] not in ")]}":
            return line
    return ""


def _body_indent(lines: list[str], start: int, end: int) -> str | None:
    """The indentation of the first statement of a class body."""
    for line in lines[start + 1 : end]:
        stripped = line.lstrip()
        if stripped and not stripped.startswith("#") and line[0] in " \t":
            return line[: len(line) - len(stripped)]
    return None


def _statements(lines: list[str], first: int, last: int, indent: str) -> list[tuple[int, int]]:
    """(start, end) of each statement at exactly ``indent`` between ``first`` and ``last``.

    A statement runs from a line at ``indent`` through every following line that
    is deeper, blank, a comment, a closing bracket at ``indent``, or inside a
    triple-quoted string; decorators join the definition they decorate.
    """
    spans: list[tuple[int, int]] = []
    open_quote: str | None = None
    start: int | None = None
    decorating = False
    for index in range(first, last):
        line = lines[index]
        if open_quote is None and _at_level(line, indent):
            body = line[len(indent):]
            continues = body[:1] in ")]}" or (decorating and _BLOCK_HEAD.match(body))
            if not continues:
                if start is not None:
                    spans.append((start, index))
                start = index
            decorating = body.startswith("@") or (decorating and body[:1] in ")]}")
        open_quote = _string_state_after(line, open_quote)
    if start is not None:
        spans.append((start, last))
    return spans


def _at_level(line: str, indent: str) -> bool:
    """A code line starting exactly at ``indent`` (not blank, not a comment)."""
    if not line.startswith(indent):
        return False
    rest = line[len(indent):]
    return bool(rest.strip()) and rest[0] not in " \t#"


def _string_state_after(line: str, open_quote: str | None) -> str | None:
    """Which triple quote (if any) is still open after ``line``."""
    position = 0
    while True:
        if open_quote is None:
            match = _TRIPLE_QUOTE_OR_COMMENT.search(line, position)
            if match is None or match.group(0) == "#":
                return None
            open_quote, position = match.group(1), match.end()
        else:
            close = line.find(open_quote, position)
            if close < 0:
                return open_quote
            open_quote, position = None, close + 3
