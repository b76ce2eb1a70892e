"""Keep only the parts of a large file that can hold attention code, before parsing.

libcst parses about 10-16k lines a second on one core, so parsing a 5,000-line
model file whole costs more than every rule together, and most of such a file is
embeddings, MLPs, heads, docstrings and comments. For files above
``MIN_LINES`` this module keeps:

- the module-level imports of names the kept code uses (rules resolve
  ``F.softmax`` through them),
- top-level functions and classes that contain attention code (``is_relevant``),
  or a tensor tiled by a head count (a mask widened for ``nn.MultiheadAttention``),
  and classes named as attention that delegate it (``Attention``, ``MHA``...),
- inside those classes, ``__init__``, the methods that contain attention code,
  and the methods that touch a module the constructor builds (a dropout applied
  in a helper is applied; a rule must not call it unused),
- small config classes (the target finder looks them up by name),

and drops every other line, including comment-only lines. The attention words that make code
relevant count only in code, not in a docstring or on a comment-only line. ``Reduced.lines``
maps each kept line back to its line in the file, so findings point at the
user's real lines; columns are untouched because whole lines are dropped.

This is a text scan, not a parse, so a pathological file can fool it; the
engine then parses the whole file instead (see ``engine._parse_exact``). The scan is
cheap because it never walks the file line by line in Python, nor builds an object
per line: regular expressions and plain searches over the whole text find the few
lines that matter (statement starts at one indentation, triple quotes, attention
words), each named by where it starts in the text, and ``_LineIndex`` answers every
question about lines from those. Under CPython a call such as ``str.find`` costs as
much as scanning a few hundred characters, so the scan also keeps its calls per
line found few: line numbers, for instance, are counted for the few lines that need
one, in runs of ``str.count`` calls that read each newline about once.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass
from itertools import accumulate, repeat

from attncheck.line_table import OTHER_BREAKS, split_lines
from attncheck.static.tree.import_names import bound_names

MIN_LINES = 400
# Each word as a stem and the endings that complete it, if it shares the stem with
# others: one search finds them all, and a search costs about as much as the text is
# long (twice as much for a stem of under six characters, the most a regex's too).
_STRONG_WORDS = (
    ("scaled_dot_product",),
    ("attention_interface",),
    ("rotate_", "half", "every_two"),
    ("apply_rotary",),
    ("repeat_kv",),
    ("baddbmm",),
    ("inv_freq",),
    ("cos_cached",),
    ("softmax",),
    ("MultiheadAttention",),  # its attn_mask is judged where the mask is built (ATT305, ATT306)
)
# Common outside attention too (losses, generation): relevant only next to a product.
_WEAK_WORDS = (("masked_fill",), (".tri", "l", "u"))
# A tensor tiled first by a head count (``mask.repeat(self.nhead, 1, 1)``, ``torch.tile(m, (n_heads,
# 1, 1))``): a mask tiled for nn.MultiheadAttention's (batch * heads) layout (ATT306), in a class
# that may hold no other attention word. ``_TILED_BY_HEADS`` is tried only where a stem is.
_TILING_WORDS = ((".repeat(",), ("tile(",))
_TILED_BY_HEADS = re.compile(r"(?:\.repeat\(|tile\((?:[^()\n]*\()?)\s*[\w.]*head", re.IGNORECASE)
# ``@`` counts even as a decorator: a class holding a mask fill and a decorated
# method is kept, and counting only a binary ``@`` would drop a finding on such a
# class (timm's Gemma4VitEncoder: an -inf fill in a helper).
_PRODUCT = re.compile(r"matmul|@|bmm|einsum")
_ATTENTION_CLASS = re.compile(r"\s*class\s+\w*(?:Attention|Attn|MHA|MultiHead)\w*\s*[(:]")
# ``self.name = Something(...)`` in a constructor: a module (or tensor) the class builds.
_BUILT = re.compile(r"self\.(\w+)\s*=\s*[\w.]+\(")
_SELF_ATTRIBUTE = re.compile(r"self\.(\w+)")
HELPER_LINES = 15  # the longest function or method kept because kept code calls it
_CALLED_METHOD = re.compile(r"self\.(\w+)\(")
_DEF_NAME = re.compile(r"\s*(?:async\s+)?def\s+(\w+)")
_WORD_CHARACTER = re.compile(r"\w")
# A config class's header, when it starts its line (a search for the word ``class``;
# ``^`` in multiline mode would make a search try every character).
_CONFIG_CLASS = re.compile(r"class[^\S\n]+\w*(?:Config|Args|Params|Settings|Options)\b")
_BLOCK_HEAD = re.compile(r"(?:class|def|async\s+def)\s|@")
# What a header says, by the group that matches: ``class``, ``def __init__``, ``def
# forward`` (``__call__`` too), or none of them for another ``def``.
_HEAD = re.compile(r"\s*(?:(class )|(?:async\s+)?def\s+(?:(__init__\b)|((?:forward|__call__)\b))?)")
_HEADS = ("def", "class", "def __init__", "def forward")
# A definition's first word and its name, from the start of its line (the target finder's
# search uses it too). A lookahead: a keyword alone on its line, unmatched, hides no next line.
DEFINITION = re.compile(r"(class|(?:async\s+)?def)(?=\s+(\w+))")
# A code line's text after its indentation: not blank, not a comment. The indentation
# is spaces and tabs only; other whitespace (a no-break space) may start the text.
_CODE_AFTER_INDENT = r"(?:[^\s#]|[^ \t#\n][^\n]*?\S)"
SMALL_CONFIG_LINES = 40
# How much of a file is searched at a time for its first ``MIN_LINES`` lines: enough
# for most, at their usual width.
_CHUNK = 50 * MIN_LINES


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
    """One file's lines, searchable as a whole, each named by where it starts.

    ``scan`` is a text whose lines are the file's lines (the file's own text unless it
    breaks lines at characters other than ``\\n``), so a regex starting with ``\\n``
    finds lines (all but the first) without a Python loop over them. A line is named by
    the position in ``scan`` where it starts, and statements and spans are ``[start,
    end)`` of such positions; the end of ``scan`` ends the last line. Where triple-quoted
    strings and attention words lie is found once per file; line numbers, a count of
    the newlines before each line, only for the lines that need one (``number``).
    """

    def __init__(self, scan: str, lines: list[str] | None = None) -> None:
        """``lines``: the file's lines, ends kept, when ``scan`` holds them with other line
        breaks (the kept text is the file's own); None when ``scan`` is the file's text."""
        self.scan = scan
        self.exact = lines is None  # positions are the file's
        self._lines = lines
        self.numbers = {0: 0}  # 0-based line numbers by position (``number``)
        self._openings, self._closings = self._strings()
        self._strong = self._in_code(self._positions_of(_STRONG_WORDS))
        self._weak = self._in_code(self._positions_of(_WEAK_WORDS))
        self._tilings = [p for p in self._in_code(self._positions_of(_TILING_WORDS)) if _TILED_BY_HEADS.match(scan, p)]

    @classmethod
    def of_large(cls, text: str) -> _LineIndex | None:
        """The index of ``text``, or None when it has fewer than ``MIN_LINES`` lines.

        ``line_table`` says what the file's lines are; it splits them only for a file
        holding a lone ``\\r`` (it builds every line, several times the cost of the tests
        that rule it out)."""
        if OTHER_BREAKS not in text or text.count(OTHER_BREAKS) == text.count("\r\n"):  # every line ends in \n
            return cls(text) if _has_lines(text, MIN_LINES) else None
        lines = split_lines(text, keepends=True)
        if len(lines) < MIN_LINES:
            return None
        # One \n per line instead of a lone \r.
        return cls("\n".join(split_lines(text)) + "\n", lines)

    def number(self, base: int, positions: list[int]) -> None:
        """Number the lines starting at ``positions`` (sorted, after ``base``, which has a
        number; the end of ``scan`` gets the number of lines) into ``numbers``, each by a
        count of the newlines since the one before."""
        counts = map(self.scan.count, repeat("\n"), [base, *positions], positions)
        lines = accumulate(counts, initial=self.numbers[base])
        next(lines)  # the base's own
        self.numbers.update(zip(positions, lines, strict=True))
        if positions and positions[-1] == len(self.scan) and not self.scan.endswith("\n"):
            self.numbers[positions[-1]] += 1  # the last line ends without a newline

    def line_led_by(self, position: int) -> int | None:
        """Where the line holding ``position`` starts, when only whitespace precedes
        ``position`` on it; else None."""
        line = self.scan.rfind("\n", 0, position) + 1
        return line if line == position or self.scan[line:position].isspace() else None

    def line_end(self, position: int) -> int:
        """Where the line holding ``position`` ends (and the next one starts)."""
        return self.scan.find("\n", position) + 1 or len(self.scan)

    def line(self, position: int) -> str:
        """The line starting at ``position``, ending in its newline. It is the file's own line
        but for its line break; checks of a line's start read the same either way."""
        return self.scan[position : self.line_end(position)]

    def original(self, start: int, end: int) -> str:
        """The file's text of the lines from ``start`` to ``end`` (numbered ones, when the
        file breaks lines at other characters)."""
        if self._lines is not None:
            return "".join(self._lines[self.numbers[start] : self.numbers[end]])
        return self.scan[start:end]

    def is_relevant(self, start: int, end: int) -> bool:
        """Whether the lines from ``start`` to ``end`` contain the makings of attention, or a
        tensor tiled by a head count."""
        if _any_between(self._strong, start, end) or _any_between(self._tilings, start, end):
            return True
        return _any_between(self._weak, start, end) and _PRODUCT.search(self.scan, start, end) is not None

    def at_level(self, indent: str, first: int, last: int) -> list[tuple[int, int]]:
        """The code lines from ``first`` to ``last`` that start exactly at ``indent`` (not
        blank, not a comment, not inside a triple-quoted string), each as ``[start, end)``,
        past its newline (one past the end of ``scan`` for a last line without one, which
        a regex's end position reads as the end). The match runs up to the newline: a
        search for it after would cost more."""
        pattern = re.compile(f"\n{re.escape(indent)}{_CODE_AFTER_INDENT}[^\n]*")  # re caches it
        lines = [(match.start() + 1, match.end() + 1) for match in pattern.finditer(self.scan, max(first - 1, 0), last)]
        if first == 0:  # the first line, which no newline precedes
            end = self.line_end(0)
            if pattern.match("\n" + self.scan[:end]):
                lines.insert(0, (0, end))
        return self._outside_strings(lines)

    def comment_only(self, start: int, end: int) -> list[tuple[int, int]]:
        """The comment-only lines from ``start`` to ``end``, each as ``[start, end)``: the
        lines whose first ``#`` only whitespace precedes (few lines hold one; a regex tried
        at every line costs more)."""
        scan, found = self.scan, []
        mark = scan.find("#", start, end)
        while mark >= 0:
            line, after = self.line_led_by(mark), self.line_end(mark)
            if line is not None:
                found.append((line, after))
            mark = scan.find("#", after, end)
        return found

    def _outside_strings(self, lines: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The sorted ``lines`` less those starting inside a triple-quoted string (one walk
        along both, not a search per line)."""
        openings, closings = self._openings, self._closings
        if not openings or not lines:
            return lines
        run = bisect_left(openings, lines[0][0]) - 1  # the last string opening before the line
        outside = []
        for line in lines:
            while run + 1 < len(openings) and openings[run + 1] < line[0]:
                run += 1
            if run < 0 or line[0] > closings[run]:
                outside.append(line)
        return outside

    def _in_code(self, positions: list[int]) -> list[int]:
        """The sorted ``positions`` less those in a triple-quoted string or on a comment-only
        line: a docstring that says "attention softmax" (every output class of a model file
        does) makes nothing relevant. A word after code on its line counts, comment or not."""
        openings, closings, scan = self._openings, self._closings, self.scan
        kept, run = [], -1
        for position in positions:
            while run + 1 < len(openings) and openings[run + 1] < position:
                run += 1
            if run >= 0 and position < closings[run] + 3:
                continue
            line = scan.rfind("\n", 0, position) + 1
            if not scan[line:position].lstrip(" \t").startswith("#"):
                kept.append(position)
        return kept

    def _positions_of(self, words: tuple[tuple[str, ...], ...]) -> list[int]:
        """Where any of ``words`` (stems and endings) occurs, sorted (a plain search per
        stem is several times faster than one regex alternating them)."""
        found: list[int] = []
        for stem, *endings in words:
            position = self.scan.find(stem)
            while position >= 0:
                if not endings or self.scan.startswith(tuple(endings), position + len(stem)):
                    found.append(position)
                position = self.scan.find(stem, position + len(stem))
        return sorted(found)

    def _strings(self) -> tuple[list[int], list[int]]:
        """The triple-quoted strings, as where each opens and closes (the end of ``scan``
        for one never closed): a line starting at ``p`` with ``opening < p <= closing``
        starts inside one.

        Outside a string, a ``#`` earlier on a triple quote's line makes it a comment;
        inside one, only the same triple quote closes it, wherever it is."""
        openings: list[int] = []
        closings: list[int] = []
        scan, position = self.scan, 0
        double, single = scan.find('"""'), scan.find("'''")
        while double >= 0 or single >= 0:
            if single < 0 or 0 <= double < single:
                opening, quote = double, '"""'
            else:
                opening, quote = single, "'''"
            mark = scan.rfind("#", position, opening)  # the last ``#`` before it: on its line?
            if mark >= 0 and scan.find("\n", mark, opening) < 0:
                position = self.line_end(opening)
            else:
                closing = scan.find(quote, opening + 3)
                openings.append(opening)
                closings.append(closing if closing >= 0 else len(scan))
                if closing < 0:
                    break
                position = closing + 3
            if 0 <= double < position:
                double = scan.find('"""', position)
            if 0 <= single < position:
                single = scan.find("'''", position)
        return openings, closings


def _has_lines(text: str, count: int) -> bool:
    """Whether ``text``, broken at ``\\n`` only, has ``count`` lines: counted a chunk at a
    time, as a large file has them long before its end."""
    newlines = 0
    for start in range(0, len(text), _CHUNK):
        newlines += text.count("\n", start, start + _CHUNK)
        if newlines >= count:
            return True
    return newlines + (bool(text) and not text.endswith("\n")) >= count


def _any_between(positions: list[int], start: int, end: int) -> bool:
    """Whether some position of the sorted ``positions`` lies in ``[start, end)``."""
    at = bisect_left(positions, start)
    return at < len(positions) and positions[at] < end


# A statement: its lines ``[start, end)``, each named by where it starts, and the line
# saying what it is (past its decorators), ``[start, end)``, or None when it has none.
_Statement = tuple[int, int, tuple[int, int] | None]


def attention_regions(text: str) -> Reduced | None:
    """The relevant part of ``text``, or None when the file is small enough to parse whole."""
    index = _LineIndex.of_large(text)
    if index is None:
        return None
    statements = _statements(index, 0, len(index.scan), "")
    headers = [header[0] for _, _, header in statements if header is not None]
    index.number(0, sorted({*(start for start, _, _ in statements), *headers, len(index.scan)}))
    kept: list[tuple[int, int]] = []
    imports: list[tuple[int, int]] = []
    definitions: Definitions = {}
    scan = index.scan
    helpers: dict[str, tuple[int, int]] = {}  # functions not kept, by name: kept if kept code calls them
    for start, end, header in statements:
        line = header or (start, start)  # an empty line: no keyword
        head = _header_keyword(scan, *line)
        if not head:
            if scan.find("import", start, end) >= 0:
                imports.append((start, end))
            continue
        definition = DEFINITION.match(scan, *line)
        if definition is not None and (head == "class", definition.group(2)) not in definitions:
            definitions[head == "class", definition.group(2)] = (index.numbers[line[0]] + 1, line[0])
        if not (index.is_relevant(start, end) or (head == "class" and _ATTENTION_CLASS.match(scan, *line))):
            if head == "class" and _is_small_config_class(index, start, end):
                kept.append((start, end))
            elif head != "class" and definition is not None:
                helpers[definition.group(2)] = (start, end)
            continue
        if head != "class":
            kept.append((start, end))
            continue
        kept += _relevant_members(index, start, end)
    kept += _called_functions(scan, kept, helpers)
    unused = _unused_imports(index, kept, imports)
    kept = _joined(sorted(kept + [span for number, span in enumerate(imports) if number not in unused]))
    return _reduced(index, _uncommented(index, kept), definitions if index.exact else None)


def _relevant_members(index: _LineIndex, start: int, end: int) -> list[tuple[int, int]]:
    """The spans of a relevant class to keep: its header, plain statements, nested
    classes, ``__init__``, the attention methods, and the methods that show each module
    the constructor builds in use (``_keep_first_uses``)."""
    indent = _body_indent(index, start, end)
    if indent is None:
        return [(start, end)]
    members = _statements(index, index.line_end(start), end, indent)
    spans = [(member_start, member_end) for member_start, member_end, _ in members]
    heads = [_header_keyword(index.scan, *header) if header is not None else "" for _, _, header in members]
    keep = [
        head in ("class", "", "def __init__") or index.is_relevant(*span)
        for span, head in zip(spans, heads, strict=True)
    ]
    if not all(keep):  # else ``_keep_first_uses`` has nothing to add
        relevant = [number for number, kept in enumerate(keep) if kept and heads[number] in ("def", "def forward")]
        _keep_first_uses(keep, heads, _uses_of_built(index.scan, spans, heads))
        _keep_called_helpers(keep, members, relevant, index.scan)
    kept = [(start, spans[0][0] if spans else end)] + [span for span, kept in zip(spans, keep, strict=True) if kept]
    return kept if len(kept) > 1 else [(start, end)]


def _uses_of_built(scan: str, spans: list[tuple[int, int]], heads: list[str]) -> list[set[str]]:
    """For each member (``spans`` of ``scan``), the modules the constructor builds that it
    uses; none for a constructor, whose own uses count for nothing (``_keep_first_uses``)."""
    constructors = [span for span, head in zip(spans, heads, strict=True) if head == "def __init__"]
    built = {name for span in constructors for name in _BUILT.findall(scan, *span)}
    return [
        built.intersection(_SELF_ATTRIBUTE.findall(scan, *span)) if built and head != "def __init__" else set()
        for span, head in zip(spans, heads, strict=True)
    ]


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


def _called_functions(
    scan: str, kept: list[tuple[int, int]], helpers: dict[str, tuple[int, int]]
) -> list[tuple[int, int]]:
    """The module-level functions that kept code calls, and those they call (``precompute(...)`` of
    a RoPE cache, ``apply_rope(q, k, cos, sin)``): rules follow values into the file's own functions.
    One search of the newly kept code per round, for the names not kept yet; short ones only."""
    helpers = {name: span for name, span in helpers.items() if _small(scan, *span)}
    found: list[tuple[int, int]] = []
    searched = kept
    for _ in range(4):
        if not helpers or not searched:
            break
        calls = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, helpers)) + r")\(")
        names = {name for start, end in searched for name in calls.findall(scan, start, end)}
        searched = [helpers.pop(name) for name in names]
        found += searched
    return found


def _keep_called_helpers(keep: list[bool], members: list[_Statement], relevant: list[int], scan: str) -> None:
    """Keep the short methods an attention member (``relevant``) calls (``self._merge_heads(y)``,
    ``self.split(x)``): a rule follows a tensor into the helper that splits, folds or merges its heads."""
    numbers = {}
    for number, (_, _, header) in enumerate(members):
        found = _DEF_NAME.match(scan, *header) if header is not None else None
        if found is not None:
            numbers[found.group(1)] = number
    for number in relevant:
        start, end, _ = members[number]
        for name in _CALLED_METHOD.findall(scan, start, end):
            if name in numbers and _small(scan, *members[numbers[name]][:2]):
                keep[numbers[name]] = True


def _small(scan: str, start: int, end: int) -> bool:
    """A helper short enough to be one step of attention (a split, a merge, a RoPE cache): kept
    when called; a long one (a mask builder, a loss, a decoding loop) costs its parse and holds
    no step the rules follow a value through."""
    return scan.count("\n", start, end) <= HELPER_LINES


def _unused_imports(index: _LineIndex, kept: list[tuple[int, int]], imports: list[tuple[int, int]]) -> set[int]:
    """The import blocks (by position in ``imports``) binding only names that no word of
    the kept code (comments included) spells."""
    bound = [bound_names(index.original(start, end)) for start, end in imports]
    kept_text = "".join(index.scan[start:end] for start, end in kept)
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


def _joined(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The sorted, disjoint ``spans`` with each run of touching ones made one."""
    joined: list[tuple[int, int]] = []
    for start, end in spans:
        if joined and joined[-1][1] == start:
            joined[-1] = (joined[-1][0], end)
        else:
            joined.append((start, end))
    return joined


def _uncommented(index: _LineIndex, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The sorted, disjoint ``spans`` less their comment-only lines, as spans whose ends are
    numbered: each counted from the start of the span (a top-level statement's, numbered)
    or, for a span that starts at a member of a class, from the end of the span before it,
    in the same class."""
    pieces: list[tuple[int, int]] = []
    base = 0
    for start, end in spans:
        comments = index.comment_only(start, end)
        base = start if start in index.numbers else base
        index.number(base, [start, *(position for comment in comments for position in comment), end])
        for comment_start, comment_end in comments:
            if start < comment_start:
                pieces.append((start, comment_start))
            start = comment_end
        if start < end:
            pieces.append((start, end))
        base = end
    return pieces


def _reduced(index: _LineIndex, pieces: list[tuple[int, int]], definitions: Definitions | None) -> Reduced:
    """The text of the kept ``pieces`` (sorted, numbered) and their lines' numbers."""
    numbers: list[int] = []
    for start, end in pieces:
        numbers.extend(range(index.numbers[start] + 1, index.numbers[end] + 1))
    return Reduced("".join([index.original(start, end) for start, end in pieces]), tuple(numbers), definitions)


def _is_small_config_class(index: _LineIndex, start: int, end: int) -> bool:
    """Whether the class from ``start`` to ``end`` (numbered) has at most
    ``SMALL_CONFIG_LINES`` lines and holds a config class header."""
    if index.numbers[end] - index.numbers[start] > SMALL_CONFIG_LINES:
        return False
    headers = _CONFIG_CLASS.finditer(index.scan, start, end)
    return any(index.line_led_by(header.start()) is not None for header in headers)


def _header_keyword(scan: str, start: int, end: int) -> str:
    """``class``, ``def __init__``, ``def forward`` (``__call__`` too), ``def``, or "" for
    a plain statement, from the header line ``[start, end)`` of a statement (empty for one
    without a header)."""
    match = _HEAD.match(scan, start, end)
    return "" if match is None else _HEADS[match.lastindex or 0]


def _body_indent(index: _LineIndex, start: int, end: int) -> str | None:
    """The indentation of the first statement of a class body."""
    position = index.line_end(start)
    while position < end:
        line = index.line(position)
        stripped = line.lstrip()
        if stripped and not stripped.startswith("#") and line[0] in " \t":
            return line[: len(line) - len(stripped)]
        position += len(line)
    return None


def _statements(index: _LineIndex, first: int, last: int, indent: str) -> list[_Statement]:
    """Each statement at exactly ``indent`` from ``first`` to ``last``.

    A statement runs from a line at ``indent`` through every following line that
    is deeper, blank, a comment, a closing bracket at ``indent``, or inside a
    triple-quoted string; decorators join the definition they decorate. Its
    header is its first line at ``indent`` that is neither a decorator nor a
    closing bracket.
    """
    statements: list[_Statement] = []
    start: int | None = None
    header: tuple[int, int] | None = None
    decorating = False
    column = len(indent)
    for line in index.at_level(indent, first, last):
        lead = index.scan[line[0] + column]  # the line's first character after ``indent``
        continues = lead in ")]}" or (decorating and _BLOCK_HEAD.match(index.scan, line[0] + column, line[1]))
        if not continues:
            if start is not None:
                statements.append((start, line[0], header))
            start, header = line[0], None
        if header is None and lead not in "@)]}":
            header = line
        decorating = lead == "@" or (decorating and lead in ")]}")
    if start is not None:
        statements.append((start, last, header))
    return statements
