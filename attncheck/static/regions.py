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
engine then parses the whole file instead (see ``engine._parse_exact``). The scan is
cheap because it never walks the file line by line in Python: regular
expressions over the whole text find the few lines that matter (statement
starts at one indentation, lines holding a triple quote), and ``_LineIndex``
answers every question about lines from those.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate

from attncheck.static.import_names import bound_names

MIN_LINES = 400
_STRONG_WORDS = (
    "scaled_dot_product",
    "attention_interface",
    "rotate_half",
    "rotate_every_two",
    "apply_rotary",
    "repeat_kv",
    "baddbmm",
    "inv_freq",
    "cos_cached",
    "softmax",
)
# Common outside attention too (losses, generation): relevant only next to a product.
_WEAK_WORDS = ("masked_fill", ".tril", ".triu")
# ``@`` counts even as a decorator: a class holding a mask fill and a decorated
# method is kept, and counting only a binary ``@`` would drop a finding on such a
# class (timm's Gemma4VitEncoder: an -inf fill in a helper).
_PRODUCT = re.compile(r"matmul|@|bmm|einsum")
_ATTENTION_CLASS = re.compile(r"\s*class\s+\w*(?:Attention|Attn|MHA|MultiHead)\w*\s*[(:]")
# ``self.name = Something(...)`` in a constructor: a module (or tensor) the class builds.
_BUILT = re.compile(r"self\.(\w+)\s*=\s*[\w.]+\(")
_SELF_ATTRIBUTE = re.compile(r"self\.(\w+)")
_WORD_CHARACTER = re.compile(r"\w")
_CONFIG_WORDS = ("Config", "Args", "Params", "Settings", "Options")
_CONFIG_CLASS = re.compile(rf"^[^\S\n]*class[^\S\n]+\w*(?:{'|'.join(_CONFIG_WORDS)})\b", re.M)
_BLOCK_HEAD = re.compile(r"(?:class|def|async\s+def)\s|@")
_ENTRY = re.compile(r"(?:async\s+)?def\s+(?:forward|__call__)\b")
_INIT = re.compile(r"(?:async\s+)?def\s+__init__\b")
_DEF = re.compile(r"(?:async\s+)?def\s")
# A definition's first word and its name, from the start of its line (the target finder's
# search uses it too). A lookahead: a keyword alone on its line, unmatched, hides no next line.
DEFINITION = re.compile(r"(class|(?:async\s+)?def)(?=\s+(\w+))")
_COMMENT_ONLY = re.compile(r"\n[^\S\n]*#")
# A code line's text after its indentation: not blank, not a comment. The indentation
# is spaces and tabs only; other whitespace (a no-break space) may start the text.
_CODE_AFTER_INDENT = r"(?:[^\s#]|[^ \t#\n][^\n]*?\S)"
SMALL_CONFIG_LINES = 40


Definitions = dict[tuple[bool, str], tuple[int, int]]  # (is a class, name) -> (line, offset)


@dataclass(frozen=True)
class Reduced:
    """The kept text, and for each of its lines the 1-based line in the original.

    ``definitions`` tells where in the file the first top-level class or function of each
    name starts (its ``class``/``def`` line, after any decorators), which the target finder
    reads the file's text from; the scan finds them anyway. None when the scan's lines are
    not the file's (a file breaking lines at characters other than ``\\n``).
    """

    text: str
    lines: tuple[int, ...]
    definitions: Definitions | None = None

    def original_line(self, line: int) -> int:
        return self.lines[line - 1] if 0 < line <= len(self.lines) else line


class _LineIndex:
    """One file's lines, searchable as a whole.

    ``scan`` is a newline followed by a text whose line ``i`` starts at
    ``offsets[i]`` and holds the file's line ``i`` (the file's own text unless it
    breaks lines at characters other than ``\\n``), so a regex starting with
    ``\\n`` finds lines by number without a Python loop over them. Which lines
    start inside a triple-quoted string, and which hold attention words, is
    worked out once per file.
    """

    def __init__(self, text: str, lines: list[str]) -> None:
        self.lines = lines
        self.exact = len(lines) == text.count("\n") + (not text.endswith("\n"))  # offsets are the file's
        if self.exact:
            self.scan = "\n" + text
            self.offsets = list(accumulate(map(len, lines), initial=1))
        else:  # ``str.splitlines`` also breaks at \r, \f, \x1c...: one \n per line instead
            plain = text.splitlines()
            self.scan = "".join(f"\n{line}" for line in plain) + "\n"
            self.offsets = list(accumulate((len(line) + 1 for line in plain), initial=1))
        self._string_starts, self._string_ends = self._strings()
        self._strong = self._lines_holding(_STRONG_WORDS)
        self._weak = self._lines_holding(_WEAK_WORDS)

    def line_at(self, position: int) -> int:
        return bisect_right(self.offsets, position) - 1

    def text(self, start: int, end: int) -> str:
        """Lines ``start`` to ``end`` (exclusive) as one string."""
        return self.scan[self.offsets[start] : self.offsets[end]]

    def in_string(self, index: int) -> bool:
        """Whether line ``index`` starts inside a triple-quoted string."""
        run = bisect_right(self._string_starts, index) - 1
        return run >= 0 and index < self._string_ends[run]

    def is_relevant(self, start: int, end: int) -> bool:
        """Whether lines ``start`` to ``end`` contain the makings of attention."""
        if _any_between(self._strong, start, end):
            return True
        return _any_between(self._weak, start, end) and _PRODUCT.search(self.text(start, end)) is not None

    def at_level(self, indent: str, first: int, last: int) -> list[int]:
        """The code lines between ``first`` and ``last`` that start exactly at ``indent``
        (not blank, not a comment, not inside a triple-quoted string)."""
        pattern = re.compile(f"\n{re.escape(indent)}{_CODE_AFTER_INDENT}")  # re caches it
        found = pattern.finditer(self.scan, self.offsets[first] - 1, self.offsets[last])
        indices = [self.line_at(match.start() + 1) for match in found]
        if self._string_starts:
            indices = [index for index in indices if not self.in_string(index)]
        return indices

    def comment_only(self, start: int, end: int) -> list[int]:
        """The comment-only lines between ``start`` and ``end``."""
        found = _COMMENT_ONLY.finditer(self.scan, self.offsets[start] - 1, self.offsets[end])
        return [self.line_at(match.start() + 1) for match in found]

    def _lines_holding(self, words: tuple[str, ...]) -> list[int]:
        """The sorted lines holding any of ``words`` (a plain search per word is several
        times faster than one regex alternating them)."""
        found: set[int] = set()
        for word in words:
            position = self.scan.find(word)
            while position >= 0:
                line = self.line_at(position)
                found.add(line)
                position = self.scan.find(word, self.offsets[line + 1])
        return sorted(found)

    def _strings(self) -> tuple[list[int], list[int]]:
        """The runs ``[start, end)`` of lines that start inside a triple-quoted string.

        Outside a string, a ``#`` earlier on a triple quote's line makes it a comment;
        inside one, only the same triple quote closes it, wherever it is."""
        starts: list[int] = []
        ends: list[int] = []
        scan, position = self.scan, 0
        upcoming = {quote: scan.find(quote) for quote in ('"""', "'''")}
        while True:
            for quote, at in upcoming.items():
                if 0 <= at < position:
                    upcoming[quote] = scan.find(quote, position)
            found = [(at, quote) for quote, at in upcoming.items() if at >= 0]
            if not found:
                break
            opening, quote = min(found)
            line = self.line_at(opening)
            if scan.find("#", max(position, self.offsets[line]), opening) >= 0:
                position = self.offsets[line + 1]
                continue
            closing = scan.find(quote, opening + 3)
            last = self.line_at(closing) if closing >= 0 else len(self.lines)
            if last > line:
                starts.append(line + 1)
                ends.append(last + 1 if closing >= 0 else last)
            if closing < 0:
                break
            position = closing + 3
        return starts, ends


def _any_between(sorted_lines: list[int], start: int, end: int) -> bool:
    """Whether some line of ``sorted_lines`` lies in ``[start, end)``."""
    at = bisect_right(sorted_lines, start - 1)
    return at < len(sorted_lines) and sorted_lines[at] < end


@dataclass(frozen=True)
class _Statement:
    """A statement's lines ``[start, end)`` and the line saying what it is (past its
    decorators), or None when it has none."""

    start: int
    end: int
    header: int | None


def attention_regions(text: str) -> Reduced | None:
    """The relevant part of ``text``, or None when the file is small enough to parse whole."""
    lines = text.splitlines(keepends=True)
    if len(lines) < MIN_LINES:
        return None
    index = _LineIndex(text, lines)
    kept: list[tuple[int, int]] = []
    imports: list[tuple[int, int]] = []
    definitions: Definitions = {}
    for statement in _statements(index, 0, len(index.lines), ""):
        start, end = statement.start, statement.end
        head = _header_keyword(index, statement)
        block = index.text(start, end)
        if head and statement.header is not None:
            _record_definition(definitions, index, statement.header, head == "class")
        if not head:
            if "import" in block:
                imports.append((start, end))
            continue
        named_attention = head == "class" and _ATTENTION_CLASS.match(_header_line(index, statement))
        if not (named_attention or index.is_relevant(start, end)):
            if head == "class" and end - start <= SMALL_CONFIG_LINES and _is_config_class(block):
                kept.append((start, end))
            continue
        if head != "class":
            kept.append((start, end))
            continue
        kept += _relevant_members(index, start, end)
    unused = _unused_imports(index, kept, imports)
    kept += [span for number, span in enumerate(imports) if number not in unused]
    return _reduced(index, sorted(kept), definitions if index.exact else None)


def _record_definition(definitions: Definitions, index: _LineIndex, header: int, is_class: bool) -> None:
    """Note where the definition on line ``header`` (0-based) starts, unless one of its name came first."""
    match = DEFINITION.match(index.lines[header])
    if match is not None:
        definitions.setdefault((is_class, match.group(2)), (header + 1, index.offsets[header] - 1))


def _relevant_members(index: _LineIndex, start: int, end: int) -> list[tuple[int, int]]:
    """The spans of a relevant class to keep: its header, plain statements, nested
    classes, ``__init__``, the attention methods, and the methods that show each module
    the constructor builds in use (``_keep_first_uses``)."""
    indent = _body_indent(index.lines, start, end)
    if indent is None:
        return [(start, end)]
    members = _statements(index, start + 1, end, indent)
    header_end = members[0].start if members else end
    heads = [_header_keyword(index, member) for member in members]
    texts = [index.text(member.start, member.end) for member in members]
    keep = [
        head in ("class", "", "def __init__") or index.is_relevant(member.start, member.end)
        for member, head in zip(members, heads, strict=True)
    ]
    constructors = [text for head, text in zip(heads, texts, strict=True) if head == "def __init__"]
    built = {name for text in constructors for name in _BUILT.findall(text)}
    if built:
        _keep_first_uses(keep, heads, [built.intersection(_SELF_ATTRIBUTE.findall(text)) for text in texts])
    spans = [(start, header_end)] + [(m.start, m.end) for m, kept in zip(members, keep, strict=True) if kept]
    return spans if len(spans) > 1 else [(start, end)]


def _keep_first_uses(keep: list[bool], heads: list[str], uses: list[set[str]]) -> None:
    """Keep ``forward`` when it uses a built module (a target is a class with one), then
    each other member that uses a built module no kept member uses yet. A dropout
    applied in a helper is applied, so rules must see one use of each module (an unused
    dropout, a missing output projection); a second use adds nothing for them."""
    seen = {
        name
        for used, kept, head in zip(uses, keep, heads, strict=True)
        if kept and head != "def __init__"
        for name in used
    }
    entries = [number for number, head in enumerate(heads) if head == "def forward"]
    for number in [*entries, *range(len(keep))]:
        if not keep[number] and uses[number] and (heads[number] == "def forward" or not uses[number] <= seen):
            keep[number] = True
            seen |= uses[number]


def _unused_imports(index: _LineIndex, kept: list[tuple[int, int]], imports: list[tuple[int, int]]) -> set[int]:
    """The import blocks (by position in ``imports``) binding only names that no word of
    the kept code (comments included) spells."""
    bound = [bound_names("".join(index.lines[start:end])) for start, end in imports]
    kept_text = "".join(index.text(start, end) for start, end in kept)
    used = {name for names in bound if names for name in names if _spells(kept_text, name)}
    return {number for number, names in enumerate(bound) if names is not None and names.isdisjoint(used)}


def _spells(text: str, name: str) -> bool:
    """Whether ``name`` is a whole word of ``text``."""
    position = text.find(name)
    while position >= 0:
        if not _WORD_CHARACTER.match(text, position + len(name)) and (
            position == 0 or not _WORD_CHARACTER.match(text, position - 1)
        ):
            return True
        position = text.find(name, position + 1)
    return False


def _reduced(index: _LineIndex, spans: list[tuple[int, int]], definitions: Definitions | None) -> Reduced:
    """The kept spans (sorted, disjoint) less their comment-only lines."""
    numbers: list[int] = []
    pieces: list[str] = []
    for start, end in spans:
        for comment in [*index.comment_only(start, end), end]:
            if start < comment:
                numbers.extend(range(start + 1, comment + 1))
                pieces.extend(index.lines[start:comment])
            start = comment + 1
    return Reduced("".join(pieces), tuple(numbers), definitions)


def _is_config_class(block: str) -> bool:
    # The words first: a regex anchored at every line of every class is most of the cost.
    return any(word in block for word in _CONFIG_WORDS) and _CONFIG_CLASS.search(block) is not None


def _header_keyword(index: _LineIndex, statement: _Statement) -> str:
    """``class``, ``def __init__``, ``def forward`` (``__call__`` too), ``def``, or "" for
    a plain statement."""
    stripped = _header_line(index, statement).lstrip()
    if stripped.startswith("class "):
        return "class"
    if _INIT.match(stripped):
        return "def __init__"
    if _ENTRY.match(stripped):
        return "def forward"
    if _DEF.match(stripped):
        return "def"
    return ""


def _header_line(index: _LineIndex, statement: _Statement) -> str:
    return index.lines[statement.header] if statement.header is not None else ""


def _body_indent(lines: list[str], start: int, end: int) -> str | None:
    """The indentation of the first statement of a class body."""
    for line in lines[start + 1 : end]:
        stripped = line.lstrip()
        if stripped and not stripped.startswith("#") and line[0] in " \t":
            return line[: len(line) - len(stripped)]
    return None


def _statements(index: _LineIndex, first: int, last: int, indent: str) -> list[_Statement]:
    """Each statement at exactly ``indent`` between ``first`` and ``last``.

    A statement runs from a line at ``indent`` through every following line that
    is deeper, blank, a comment, a closing bracket at ``indent``, or inside a
    triple-quoted string; decorators join the definition they decorate. Its
    header is its first line at ``indent`` that is neither a decorator nor a
    closing bracket.
    """
    statements: list[_Statement] = []
    start: int | None = None
    header: int | None = None
    decorating = False
    for line in index.at_level(indent, first, last):
        body = index.lines[line][len(indent) :]
        continues = body[:1] in ")]}" or (decorating and _BLOCK_HEAD.match(body))
        if not continues:
            if start is not None:
                statements.append(_Statement(start, line, header))
            start, header = line, None
        if header is None and body[:1] not in "@)]}":
            header = line
        decorating = body.startswith("@") or (decorating and body[:1] in ")]}")
    if start is not None:
        statements.append(_Statement(start, last, header))
    return statements
