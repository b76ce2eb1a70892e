"""libcst trees built from Python's own parser, for reading, about five times cheaper.

libcst's parser keeps every space and comment so that a tree can be written
back unchanged. The rules only read a tree, and a libcst parse costs about a
third of a lint; ``ast.parse`` reads the same text about twelve times faster.
``build(text)`` converts the ``ast`` tree into the libcst node classes the rules
know, with the same shape as libcst's own tree for the same text (checked node
by node against ``cst.parse_module`` in ``tests/static/test_tree_fast_tree.py``). It leaves
out what a reader does not need:

- whitespace, comments and punctuation are libcst's defaults, so generating
  code from a node would normalise its spacing; ``FastModule.code_for_node``
  returns libcst's code instead: the user's text, with the parentheses that
  group the node;
- those parentheses are not in ``lpar`` (``FastModule.parenthesized`` reads them);
- positions come from ``ast`` (``Positions``) rather than from code generation;
  inside an f-string, where Python 3.11's are wrong, from each field's own text
  (``fstrings``).

A construct the conversion does not model, a position it does not know, or the
code of a node it did not place raises ``NotModelledError`` or
``MissingPositionError``: the engine then lints the file with libcst's parser,
so a gap here costs time, never a finding.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import re
import tokenize
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cache
from keyword import kwlist
from typing import Any

import libcst as cst
from libcst.metadata import CodePosition, CodeRange

from attncheck.static.tree import construct, fstrings, node_fields, subtree

Span = tuple[int, int, int, int]  # start line, start byte column, end line, end byte column


class _Grouped:
    """Where an argument is, until it is asked: its value's span (an ast node) widened over
    the parentheses that group it (``_grouped``; libcst's Arg holds the value's ``lpar`` and
    ``rpar``). Finding them reads the bytes around every argument, about a tenth of a
    conversion, and few arguments are ever asked where they are or what their code is;
    ``_resolved`` widens the span when one is."""

    __slots__ = ("value",)

    def __init__(self, value: ast.expr) -> None:
        self.value = value


_Located = ast.AST | Span | _Grouped


class NotModelledError(Exception):
    """The text holds a construct this conversion does not model."""


class MissingPositionError(Exception):
    """A rule asked where a node is, and the conversion did not record it.

    Not a KeyError on purpose: ``get_metadata(..., default)`` would swallow that
    and the rule would go on without a position libcst's tree has.
    """


_new = construct.new
_set = object.__setattr__


class FastModule(cst.Module):
    """A module built by ``build``: its code for a node is the user's own text.

    ``events`` lists the nodes under it of the ``EVENT_CLASSES`` in pre-order (libcst's
    visiting order), each with the index in ``events`` just past its subtree: a walk that
    asks only about those classes replays the list instead of walking the tree (``walk``).
    The module itself is not listed: the list would hold it in a reference cycle."""

    # Module: a replay visits the root itself, so callbacks on it are covered too.
    EVENT_CLASSES = frozenset({cst.Module, cst.ClassDef, cst.FunctionDef, cst.Lambda, cst.Call,
                               cst.BinaryOperation, cst.Subscript, cst.Assign, cst.AugAssign, cst.AnnAssign,
                               cst.Return, cst.Import, cst.ImportFrom})

    def code_for_node(self, node: cst.CSTNode) -> str:
        """libcst's code for ``node``: its text, with the parentheses that group it (libcst
        keeps them in the node's ``lpar``/``rpar``). A node the analyses built is generated,
        as libcst does, around the user's text of the parts it holds. A node of the tree the
        conversion did not place raises NotModelledError: the file goes to libcst's tree."""
        positions = self.positions
        if id(node) in positions.spans:
            return positions.text_of(self._code_span(node))
        if positions.in_tree(node):
            raise NotModelledError(f"the code of a {type(node).__name__} without a span")
        return self._generated(node)

    def _generated(self, node: cst.CSTNode) -> str:
        """The code of a node the analyses built (``x.shape[1]`` for ``b, s, d = x.shape``)."""
        try:
            return super().code_for_node(self._for_generation(node))
        except TypeError as error:  # a tree node its parent generates with arguments (an Arg)
            raise NotModelledError(f"the code of a built {type(node).__name__}") from error

    def _for_generation(self, node: cst.CSTNode) -> cst.CSTNode:
        """``node`` for libcst's code generation: a node of the tree stands as its own text (in a
        Name, whose generation writes its value as it is), a built one as a copy of itself whose
        parts are, in turn, ready for generation."""
        if type(node) in node_fields.TRIVIA:
            return node
        if id(node) in self.positions.spans or self.positions.in_tree(node):
            return _new[cst.Name](value=self.code_for_node(node))
        parts: dict[str, Any] = {}
        for name in subtree.fields(type(node)) or ():
            value = getattr(node, name)
            if isinstance(value, (list, tuple)):
                parts[name] = [self._for_generation(item) for item in value]
            elif isinstance(value, cst.CSTNode):
                parts[name] = self._for_generation(value)
        return _new[type(node)](**{f.name: parts.get(f.name, getattr(node, f.name)) for f in dataclasses.fields(node)})

    def _code_span(self, node: cst.CSTNode) -> Span:
        """Where libcst's code for ``node`` is: its own text and the parentheses that group it."""
        if type(node) in _OWN_PARENTHESES:
            raise NotModelledError(f"the code of a {type(node).__name__}")
        located = self.positions.spans.get(id(node))
        if located is None:
            raise NotModelledError(f"the code of a {type(node).__name__} without a span")
        return _grouped(self.positions.lines, self._written(node, _resolved(located, self.positions.lines)))

    def _written(self, node: cst.CSTNode, span: Span) -> Span:
        """Where ``node``'s own text is: its span, but for a tuple, which runs from its first
        element's code to its last's (and a trailing comma), or over its own parentheses."""
        written = self.positions.written.get(id(node))
        if written is None:
            return span
        if self._own_parentheses(node):
            return written
        elements = node.elements  # type: ignore[attr-defined]
        start = self._code_span(elements[0].value)
        end_line, end_column = self._code_span(elements[-1].value)[2:]
        if self.positions.lines[end_line - 1].encode()[end_column : end_column + 1] == b",":
            end_column += 1  # libcst's tuple ends after a trailing comma
        return start[0], start[1], end_line, end_column

    def parenthesized(self, node: cst.CSTNode) -> bool:
        """Whether parentheses group ``node``: what a non-empty ``lpar`` says in libcst's tree
        (whose tuples keep their own parentheses there too)."""
        positions = self.positions
        if id(node) not in positions.spans and not positions.in_tree(node):
            return bool(getattr(node, "lpar", ()))  # built by the analyses, on either tree
        return self._own_parentheses(node) or \
            self._code_span(node) != self._written(node, _resolved(positions.spans[id(node)], positions.lines))

    def _own_parentheses(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` is a tuple with parentheses of its own: ``(a, b)``, not ``(a), b``
        (whose text starts with a parenthesis too, its first element's)."""
        written = self.positions.written.get(id(node))
        return written is not None and written[:2] < self._code_span(node.elements[0].value)[:2]  # type: ignore[attr-defined]


class Positions(Mapping[cst.CSTNode, CodeRange]):
    """``PositionProvider``'s mapping for a built tree, computed on demand from
    the ``ast`` spans (whose columns count UTF-8 bytes, libcst's count characters)."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = lines
        # By id, not by node: a node's hash is Python code, and a tree has a million of them.
        # The tree keeps them alive, so no other object takes one of these ids meanwhile.
        self.spans: dict[int, _Located] = {}
        self.root: Callable[[], cst.CSTNode | None] = lambda: None  # weak: the module holds this mapping
        self._tree: set[int] | None = None
        # A tuple's own text, parentheses included, by id: its span above is libcst's position,
        # which runs from its first element to its last.
        self.written: dict[int, Span] = {}

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        located = self.spans.get(id(node))
        if located is None:
            if not self.in_tree(node):
                # A node the analyses built (``b, s, d = x.shape`` binds s to ``x.shape[1]``):
                # libcst's mapping has no such key either.
                raise KeyError(node)
            raise MissingPositionError(type(node).__name__)
        line, column, end_line, end_column = _resolved(located, self.lines)
        return CodeRange(
            CodePosition(line, self._characters(line, column)),
            CodePosition(end_line, self._characters(end_line, end_column)),
        )

    def in_tree(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` (not punctuation or whitespace) is a node of the built tree rather than
        one the analyses built. A node of a class the conversion always places is in the tree
        when it has a span; for the others, the tree's nodes are listed on the first question."""
        if id(node) in self.spans:
            return True
        if type(node) in ALWAYS_PLACED:
            return False  # built: ``b, s, d = x.shape`` binds s to ``x.shape[1]``
        if self._tree is None:
            root = self.root()
            self._tree = {id(n) for n in subtree.preorder(root)} if root is not None else set()
        return id(node) in self._tree

    def __iter__(self) -> Iterator[cst.CSTNode]:
        root = self.root()
        nodes = subtree.preorder(root) if root is not None else ()
        return (node for node in nodes if id(node) in self.spans)

    def __len__(self) -> int:
        return len(self.spans)

    def _characters(self, line: int, column: int) -> int:
        text = self.lines[line - 1]
        return column if text.isascii() else len(text.encode()[:column].decode(errors="ignore"))

    def text_of(self, located: _Located) -> str:
        line, column, end_line, end_column = _resolved(located, self.lines)
        if line == end_line:
            return _byte_slice(self.lines[line - 1], column, end_column)
        parts = [_byte_slice(self.lines[line - 1], column, None)]
        parts += self.lines[line : end_line - 1]
        parts.append(_byte_slice(self.lines[end_line - 1], 0, end_column))
        return "".join(parts)


def _span(located: ast.AST | Span) -> Span:
    if isinstance(located, tuple):
        return located
    return located.lineno, located.col_offset, located.end_lineno, located.end_col_offset  # type: ignore[attr-defined,return-value]


def _resolved(located: _Located, lines: Sequence[str]) -> Span:
    """The span a recorded place stands for, in the text of ``lines``: an argument's is widened
    over the parentheses that group it here, when it is first asked for (``_Grouped``)."""
    if type(located) is _Grouped:
        return _grouped(lines, _span(located.value))
    return _span(located)  # type: ignore[arg-type]


# A generator's parentheses are its own, or its call's when it is the only argument, and libcst
# tells them apart in ways its text alone does not: its code is left to libcst's tree.
_OWN_PARENTHESES = frozenset({cst.GeneratorExp})
# The classes of the nodes the analyses build (``facts``, ``patterns``), which the conversion
# places wherever it makes one (checked on every fixture in tests/static/test_tree_fast_tree.py): one of
# them without a span was built, and telling so needs no list of the tree's nodes.
ALWAYS_PLACED = frozenset({cst.Call, cst.Arg, cst.Subscript, cst.SubscriptElement, cst.Index, cst.Integer,
                           cst.BinaryOperation, cst.UnaryOperation})


def _grouped(lines: Sequence[str], span: Span) -> Span:
    """``span`` widened over each pair of parentheses that groups it: a "(" right before it and
    a ")" right after, where the "(" does not open a call's arguments (``f(x)``)."""
    while True:
        before = _previous(lines, span[0], span[1])
        after = _following(lines, span[2], span[3])
        if before is None or after is None or _at(lines, before) != "(" or _at(lines, after) != ")":
            return span
        callee = _previous(lines, *before)
        if callee is not None and _ends_a_callee(lines, callee):
            return span
        span = (before[0], before[1], after[0], after[1] + 1)


def _at(lines: Sequence[str], place: tuple[int, int]) -> str:
    return chr(lines[place[0] - 1].encode()[place[1]])


def _previous(lines: Sequence[str], line: int, column: int) -> tuple[int, int] | None:
    """Where the last character before (line, byte column) that is not blank is, crossing
    line ends, comments and backslash continuations."""
    text = lines[line - 1].encode()[:column]
    while True:
        stripped = text.rstrip()
        if stripped.endswith(b"\\"):
            stripped = stripped[:-1].rstrip()
        if stripped:
            return line, len(stripped) - 1
        line -= 1
        if line < 1:
            return None
        text = _without_comment(lines[line - 1].encode())


def _without_comment(text: bytes) -> bytes:
    """A line without its comment, read with the single-line strings it holds. A line with a
    triple quote may end a string begun above, which only a tokenizer reads: NotModelledError."""
    if b"#" not in text:
        return text
    if b'"""' in text or b"'''" in text:
        raise NotModelledError("a comment may stand between a node and its parentheses")
    quote, escaped = 0, False
    for index, byte in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == quote:
                quote = 0
        elif byte in (0x22, 0x27):  # " '
            quote = byte
        elif byte == 0x23:  # #
            return text[:index]
    return text


def _following(lines: Sequence[str], line: int, column: int) -> tuple[int, int] | None:
    """Where the first character at or after (line, byte column) that is not blank, a comment
    or a backslash continuation is (from the end of a node, a ``#`` can only start a comment)."""
    while line <= len(lines):
        text = lines[line - 1].encode()
        rest = text[column:]
        stripped = rest.lstrip()
        if stripped and not stripped.startswith((b"#", b"\\\n", b"\\\r")):
            return line, len(text) - len(stripped)
        line, column = line + 1, 0
    return None


# Keywords a "(" can follow without calling them (``return (x)``); None, True and False are values.
_KEYWORD = re.compile(rb"(?:%s)$" % b"|".join(w.encode() for w in kwlist if w not in ("None", "True", "False")))
_WORD_END = re.compile(rb"\w$")


def _ends_a_callee(lines: Sequence[str], place: tuple[int, int]) -> bool:
    """Whether the character at ``place``, right before a "(", ends something that "(" calls:
    a name (not a keyword: ``return (x)``), a closing bracket, or a string."""
    text = lines[place[0] - 1].encode()[: place[1] + 1]
    if text.endswith((b")", b"]", b"}", b"'", b'"')):
        return True
    if not _WORD_END.search(text) and text[-1] < 0x80:
        return False
    word = re.search(rb"[\w\x80-\xff]+$", text)
    return word is None or _KEYWORD.fullmatch(word.group()) is None


def _byte_slice(line: str, start: int, end: int | None) -> str:
    if line.isascii():
        return line[start:end]
    return line.encode()[start:end].decode(errors="replace")


def build(text: str) -> FastModule:
    """The libcst tree of ``text``, from ``ast.parse``; raises SyntaxError like it."""
    tree = ast.parse(text)  # first: a file Python rejects is said so, whatever its line endings
    if "\r" in text or "\f" in text or "\v" in text:
        raise NotModelledError("line endings other than \\n")
    lines = text.splitlines(keepends=True)
    if len(lines) != text.count("\n") + (not text.endswith("\n") and bool(text)):
        raise NotModelledError("a line separator ast does not split on")
    converter = _Converter(lines)
    module = _new[FastModule](body=converter.statements(tree.body),
                              has_trailing_newline=text.endswith("\n") or not text)
    _set(module, "positions", converter.positions)
    _set(module, "events", converter.events)
    converter.positions.root = weakref.ref(module)
    return module


_BINARY = {
    ast.Add: cst.Add, ast.Sub: cst.Subtract, ast.Mult: cst.Multiply, ast.Div: cst.Divide,
    ast.FloorDiv: cst.FloorDivide, ast.Mod: cst.Modulo, ast.Pow: cst.Power, ast.MatMult: cst.MatrixMultiply,
    ast.LShift: cst.LeftShift, ast.RShift: cst.RightShift, ast.BitOr: cst.BitOr, ast.BitXor: cst.BitXor,
    ast.BitAnd: cst.BitAnd,
}
_AUGMENTED = {
    ast.Add: cst.AddAssign, ast.Sub: cst.SubtractAssign, ast.Mult: cst.MultiplyAssign,
    ast.Div: cst.DivideAssign, ast.FloorDiv: cst.FloorDivideAssign, ast.Mod: cst.ModuloAssign,
    ast.Pow: cst.PowerAssign, ast.MatMult: cst.MatrixMultiplyAssign, ast.LShift: cst.LeftShiftAssign,
    ast.RShift: cst.RightShiftAssign, ast.BitOr: cst.BitOrAssign, ast.BitXor: cst.BitXorAssign,
    ast.BitAnd: cst.BitAndAssign,
}
_UNARY = {ast.UAdd: cst.Plus, ast.USub: cst.Minus, ast.Invert: cst.BitInvert, ast.Not: cst.Not}
_BOOLEAN = {ast.And: cst.And, ast.Or: cst.Or}
_COMPARE = {
    ast.Eq: cst.Equal, ast.NotEq: cst.NotEqual, ast.Lt: cst.LessThan, ast.LtE: cst.LessThanEqual,
    ast.Gt: cst.GreaterThan, ast.GtE: cst.GreaterThanEqual, ast.Is: cst.Is, ast.IsNot: cst.IsNot,
    ast.In: cst.In, ast.NotIn: cst.NotIn,
}
# One shared instance per operator: they carry only (default) whitespace. Augmented
# assignments have their own table: ast spells ``+=`` with the same ast.Add as ``+``.
_OPERATORS = {op: _new[cls]() for table in (_BINARY, _UNARY, _BOOLEAN, _COMPARE) for op, cls in table.items()}
_AUGMENTED_OPERATORS = {op: _new[cls]() for op, cls in _AUGMENTED.items()}
_SMALL = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Pass, ast.Break,
          ast.Continue, ast.Raise, ast.Assert, ast.Delete, ast.Import, ast.ImportFrom, ast.Global,
          ast.Nonlocal)
_NAME_CONSTANTS = {True: "True", False: "False", None: "None"}
_DEF = re.compile(rb"(?:async\s+)?(?:def|class)\s+")


class _Converter:
    """One conversion: ast nodes in, libcst nodes out, each one's span recorded. Children are
    converted in libcst's visiting order, so that ``events`` come out in pre-order."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = lines
        self.positions = Positions(lines)
        self.spans = self.positions.spans
        self.events: list[Any] = []
        self.expressions = _methods(type(self), "expr_")
        self.small_statements = _methods(type(self), "small_")
        self.in_function = False
        self.placed: set[int] = set()  # the functions outside functions in this tree, by id

    def at(self, node: cst.CSTNode, located: _Located) -> Any:
        self.spans[id(node)] = located
        return node

    def opened(self) -> int:
        """The place in ``events`` of a node of an ``EVENT_CLASSES`` class whose children are
        converted next: nodes are made after their children, events come in pre-order."""
        self.events.append(None)
        return len(self.events) - 1

    def closed(self, slot: int, node: Any) -> Any:
        self.events[slot] = (node, len(self.events))
        return node

    # Statements ----------------------------------------------------------

    def statements(self, body: Sequence[ast.stmt]) -> list[cst.BaseStatement]:
        """Compound statements one by one; small ones grouped by line, as
        libcst does for ``a = 1; b = 2``."""
        out: list[cst.BaseStatement] = []
        group: list[ast.stmt] = []
        for statement in body:
            if isinstance(statement, _SMALL):
                if group and statement.lineno != group[-1].end_lineno:
                    out.append(self.line(group))
                    group = []
                group.append(statement)
                continue
            if group:
                out.append(self.line(group))
                group = []
            out.append(self.compound(statement))
        if group:
            out.append(self.line(group))
        return out

    def line(self, group: Sequence[ast.stmt]) -> cst.SimpleStatementLine:
        body = [self.small(s) for s in group]
        return self.at(_new[cst.SimpleStatementLine](body=body), _between(group[0], group[-1]))

    def block(self, body: Sequence[ast.stmt]) -> cst.BaseSuite:
        first = body[0]
        before = self.lines[first.lineno - 1].encode()[: first.col_offset]
        if before.strip():  # ``if x: return y``: the body shares the header's line
            small = [self.small(s) for s in body]
            return self.at(_new[cst.SimpleStatementSuite](body=small), _between(first, body[-1]))
        return self.at(_new[cst.IndentedBlock](body=self.statements(body)), _between(first, body[-1]))

    def small(self, node: ast.stmt) -> cst.BaseSmallStatement:
        return self.at(self.small_statements[type(node)](self, node), node)

    def small_Expr(self, node: ast.Expr) -> cst.Expr:
        return _new[cst.Expr](value=self.expr(node.value))

    def small_Assign(self, node: ast.Assign) -> cst.Assign:
        slot = self.opened()
        targets = [self.at(_new[cst.AssignTarget](target=self.expr(t)), t) for t in node.targets]
        return self.closed(slot, _new[cst.Assign](targets=targets, value=self.expr(node.value)))

    def small_AugAssign(self, node: ast.AugAssign) -> cst.AugAssign:
        slot = self.opened()
        return self.closed(slot, _new[cst.AugAssign](
            target=self.expr(node.target), operator=_AUGMENTED_OPERATORS[type(node.op)], value=self.expr(node.value)))

    def small_AnnAssign(self, node: ast.AnnAssign) -> cst.AnnAssign:
        slot = self.opened()
        target = self.expr(node.target)
        annotation = self.annotation(node.annotation)
        value = self.expr(node.value) if node.value is not None else None
        return self.closed(slot, _new[cst.AnnAssign](target=target, annotation=annotation, value=value))

    def small_Return(self, node: ast.Return) -> cst.Return:
        slot = self.opened()
        return self.closed(slot, _new[cst.Return](value=self.optional(node.value)))

    def small_Pass(self, node: ast.Pass) -> cst.Pass:
        return _new[cst.Pass]()

    def small_Break(self, node: ast.Break) -> cst.Break:
        return _new[cst.Break]()

    def small_Continue(self, node: ast.Continue) -> cst.Continue:
        return _new[cst.Continue]()

    def small_Raise(self, node: ast.Raise) -> cst.Raise:
        cause = None
        if node.cause is not None:
            cause = self.at(_new[cst.From](item=self.expr(node.cause)), node.cause)
        return _new[cst.Raise](exc=self.optional(node.exc), cause=cause)

    def small_Assert(self, node: ast.Assert) -> cst.Assert:
        return _new[cst.Assert](test=self.expr(node.test), msg=self.optional(node.msg))

    def small_Delete(self, node: ast.Delete) -> cst.Del:
        if len(node.targets) == 1:
            target = self.expr(node.targets[0])
        else:
            elements = [self.at(_new[cst.Element](value=self.expr(t)), t) for t in node.targets]
            target = self.at(_new[cst.Tuple](elements=elements), _between(node.targets[0], node.targets[-1]))
        return _new[cst.Del](target=target)

    def small_Import(self, node: ast.Import) -> cst.Import:
        return self.closed(self.opened(), _new[cst.Import](names=[self.alias(a) for a in node.names]))

    def small_ImportFrom(self, node: ast.ImportFrom) -> cst.ImportFrom:
        slot = self.opened()
        module = self.dotted(node.module) if node.module else None
        if len(node.names) == 1 and node.names[0].name == "*":
            names: Any = _new[cst.ImportStar]()
        else:
            names = [self.alias(a) for a in node.names]
        relative = [_new[cst.Dot]() for _ in range(node.level)]
        return self.closed(slot, _new[cst.ImportFrom](module=module, names=names, relative=relative))

    def small_Global(self, node: ast.Global) -> cst.Global:
        return _new[cst.Global](names=_name_items(node.names))

    def small_Nonlocal(self, node: ast.Nonlocal) -> cst.Nonlocal:
        return _new[cst.Nonlocal](names=_name_items(node.names))

    def alias(self, node: ast.alias) -> cst.ImportAlias:
        name, asname = self.dotted(node.name), None
        if node.asname is not None:
            asname = _new[cst.AsName](name=_new[cst.Name](value=node.asname))
        # The imported name, where it is written without spaces (``import a . b`` is Python too).
        if node.lineno == node.end_lineno and self.positions.text_of(node).startswith(node.name):
            self.at(name, (node.lineno, node.col_offset, node.lineno, node.col_offset + len(node.name.encode())))
        return self.at(_new[cst.ImportAlias](name=name, asname=asname), node)

    def dotted(self, name: str) -> cst.Name | cst.Attribute:
        """``a.b.c`` as libcst's Attribute chain (import names carry no spans of their own)."""
        parts = name.split(".")
        found: cst.Name | cst.Attribute = _new[cst.Name](value=parts[0])
        for part in parts[1:]:
            found = _new[cst.Attribute](value=found, attr=_new[cst.Name](value=part))
        return found

    def compound(self, node: ast.stmt) -> cst.BaseCompoundStatement:
        if type(node) in _FUNCTIONS and not self.in_function:
            return self.function(node)  # type: ignore[arg-type]
        # ``async def``/``async for``/``async with`` share the plain statement's conversion.
        method = getattr(self, f"compound_{type(node).__name__.removeprefix('Async')}", None)
        if method is None:
            raise NotModelledError(type(node).__name__)
        return self.at(method(node), node)

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> cst.FunctionDef:
        """A function outside any function: converted, or its conversion from an earlier
        tree of the same text (``_CONVERTED``), placed at its lines here."""
        first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
        text = "".join(self.lines[first - 1 : node.end_lineno])
        earlier = _CONVERTED.get(text)
        if earlier is not None and id(earlier.node) not in self.placed:
            self.placed.add(id(earlier.node))
            earlier.place(self, first)
            return earlier.node
        outer_spans, outer_written, start = self.spans, self.positions.written, len(self.events)
        self.spans = self.positions.spans = {}
        self.positions.written = {}
        self.in_function = True
        try:
            converted = self.at(self.compound_FunctionDef(node), node)
            self.placed.add(id(converted))
            if earlier is None:
                spans, written = self.spans, self.positions.written
                _CONVERTED.offer(text, lambda: _Converted(converted, first, spans, written, self.events[start:], start,
                                                           self.lines))
            return converted
        finally:
            self.in_function = False
            outer_spans.update(self.spans)
            outer_written.update(self.positions.written)
            self.spans = self.positions.spans = outer_spans
            self.positions.written = outer_written

    def compound_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> cst.FunctionDef:
        slot = self.opened()
        decorators = [self.decorator(d) for d in node.decorator_list]
        name = self.definition_name(node)
        params = self.parameters(node.args)
        returns = self.annotation(node.returns) if node.returns is not None else None
        return self.closed(slot, _new[cst.FunctionDef](
            name=name, params=params, body=self.block(node.body), decorators=decorators, returns=returns,
            asynchronous=_new[cst.Asynchronous]() if isinstance(node, ast.AsyncFunctionDef) else None,
        ))


    def compound_ClassDef(self, node: ast.ClassDef) -> cst.ClassDef:
        slot = self.opened()
        decorators = [self.decorator(d) for d in node.decorator_list]
        name = self.definition_name(node)
        bases = [self.at(_new[cst.Arg](value=self.expr(b)), b) for b in node.bases]
        keywords = [self.keyword(k) for k in node.keywords]
        return self.closed(slot, _new[cst.ClassDef](name=name, body=self.block(node.body), bases=bases,
                                                    keywords=keywords, decorators=decorators))

    def definition_name(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> cst.Name:
        head = _DEF.match(self.lines[node.lineno - 1].encode(), node.col_offset)
        if head is None:
            raise NotModelledError("a definition whose name is not on its first line")
        start = head.end()
        return self.at(_new[cst.Name](value=node.name),
                       (node.lineno, start, node.lineno, start + len(node.name.encode())))

    def decorator(self, node: ast.expr) -> cst.Decorator:
        return _new[cst.Decorator](decorator=self.expr(node))

    def compound_If(self, node: ast.If) -> cst.If:
        test, body, orelse = self.expr(node.test), self.block(node.body), None
        if node.orelse:
            first = node.orelse[0]
            if isinstance(first, ast.If) and len(node.orelse) == 1 and self._is_elif(first):
                orelse = self.at(self.compound_If(first), first)
            else:
                orelse = _new[cst.Else](body=self.block(node.orelse))
        return _new[cst.If](test=test, body=body, orelse=orelse)

    def _is_elif(self, node: ast.If) -> bool:
        return self.lines[node.lineno - 1].encode()[node.col_offset : node.col_offset + 4] == b"elif"

    def orelse(self, body: Sequence[ast.stmt]) -> cst.Else | None:
        return _new[cst.Else](body=self.block(body)) if body else None

    def compound_For(self, node: ast.For | ast.AsyncFor) -> cst.For:
        return _new[cst.For](
            target=self.expr(node.target), iter=self.expr(node.iter), body=self.block(node.body),
            orelse=self.orelse(node.orelse),
            asynchronous=_new[cst.Asynchronous]() if isinstance(node, ast.AsyncFor) else None,
        )


    def compound_While(self, node: ast.While) -> cst.While:
        return _new[cst.While](test=self.expr(node.test), body=self.block(node.body),
                               orelse=self.orelse(node.orelse))

    def compound_With(self, node: ast.With | ast.AsyncWith) -> cst.With:
        items = []
        for item in node.items:
            context = self.expr(item.context_expr)
            asname = None
            if item.optional_vars is not None:
                asname = _new[cst.AsName](name=self.expr(item.optional_vars))
            items.append(_new[cst.WithItem](item=context, asname=asname))
        return _new[cst.With](items=items, body=self.block(node.body),
                              asynchronous=_new[cst.Asynchronous]() if isinstance(node, ast.AsyncWith) else None)


    def compound_Try(self, node: ast.Try) -> cst.Try:
        body = self.block(node.body)
        handlers = []
        for handler in node.handlers:
            kind = self.optional(handler.type)
            name = None
            if handler.name is not None:
                name = _new[cst.AsName](name=_new[cst.Name](value=handler.name))
            handlers.append(self.at(_new[cst.ExceptHandler](type=kind, name=name, body=self.block(handler.body)),
                                    handler))
        orelse = self.orelse(node.orelse)
        finalbody = _new[cst.Finally](body=self.block(node.finalbody)) if node.finalbody else None
        return _new[cst.Try](body=body, handlers=handlers, orelse=orelse, finalbody=finalbody)

    # Parameters and arguments -------------------------------------------

    def parameters(self, args: ast.arguments) -> cst.Parameters:
        positional = [*args.posonlyargs, *args.args]
        defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
        params = [self.param(a, d) for a, d in zip(positional, defaults, strict=True)]
        posonly = params[: len(args.posonlyargs)]
        star_arg: Any = cst.MaybeSentinel.DEFAULT
        if args.vararg is not None:
            star_arg = self.param(args.vararg, None, star="*")
        elif args.kwonlyargs:
            star_arg = _new[cst.ParamStar]()
        kwonly = [self.param(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)]
        star_kwarg = self.param(args.kwarg, None, star="**") if args.kwarg is not None else None
        return _new[cst.Parameters](
            params=params[len(args.posonlyargs):], posonly_params=posonly,
            posonly_ind=_new[cst.ParamSlash]() if posonly else cst.MaybeSentinel.DEFAULT,
            star_arg=star_arg, kwonly_params=kwonly, star_kwarg=star_kwarg,
        )

    def param(self, arg: ast.arg, default: ast.expr | None, star: str = "") -> cst.Param:
        end = arg.col_offset + len(arg.arg.encode())
        name = self.at(_new[cst.Name](value=arg.arg), (arg.lineno, arg.col_offset, arg.lineno, end))
        located = (arg.lineno, arg.col_offset - len(star), arg.lineno, end)  # libcst's includes the stars
        annotation = self.annotation(arg.annotation) if arg.annotation is not None else None
        value = self.expr(default) if default is not None else None
        return self.at(_new[cst.Param](name=name, annotation=annotation, default=value, star=star), located)

    def annotation(self, node: ast.expr) -> cst.Annotation:
        return self.at(_new[cst.Annotation](annotation=self.expr(node)), node)

    def arguments(self, node: ast.Call) -> list[cst.Arg]:
        """The arguments in the order they are written (``f(*a, k=1, *b)`` mixes ast's two lists)."""
        if not node.keywords:
            return [self.argument(value) for value in node.args]
        written = sorted([*node.args, *node.keywords], key=lambda item: (item.lineno, item.col_offset))
        return [self.keyword(item) if isinstance(item, ast.keyword) else self.argument(item) for item in written]

    def argument(self, value: ast.expr) -> cst.Arg:
        if isinstance(value, ast.Starred):
            return self.at(_new[cst.Arg](value=self.expr(value.value), star="*"), value)
        converted = self.expr(value)
        # A lone generator argument borrows the call's parentheses in ast's span. Any other
        # argument's span is its value's and the parentheses around it, as in libcst (whose
        # Arg holds the value's ``lpar``/``rpar``): ast's ends inside them (``f(((s)))``).
        located = self.spans.get(id(converted), value) if isinstance(value, ast.GeneratorExp) else _Grouped(value)
        return self.at(_new[cst.Arg](value=converted), located)

    def keyword(self, node: ast.keyword) -> cst.Arg:
        if node.arg is None:
            return self.at(_new[cst.Arg](value=self.expr(node.value), star="**"), node)
        name = self.at(_new[cst.Name](value=node.arg),
                       (node.lineno, node.col_offset, node.lineno, node.col_offset + len(node.arg.encode())))
        return self.at(_new[cst.Arg](value=self.expr(node.value), keyword=name), node)

    # Expressions ---------------------------------------------------------

    def optional(self, node: ast.expr | None) -> cst.BaseExpression | None:
        return self.expr(node) if node is not None else None

    def expr(self, node: ast.expr) -> Any:
        method = self.expressions.get(type(node))
        if method is None:
            raise NotModelledError(type(node).__name__)
        return method(self, node)

    def expr_Name(self, node: ast.Name) -> cst.Name:
        name = _new[cst.Name](value=node.id)
        self.spans[id(name)] = node  # self.at, inlined for the commonest node
        return name

    def expr_Constant(self, node: ast.Constant) -> Any:
        value = node.value
        if value is None or value is True or value is False:
            return self.at(_new[cst.Name](value=_NAME_CONSTANTS[value]), node)
        if value is Ellipsis:
            return self.at(_new[cst.Ellipsis](), node)
        text = self.positions.text_of(node)
        if isinstance(value, int):  # True and False are Names, above
            return self.at(_new[cst.Integer](value=text), node)
        if isinstance(value, float):
            return self.at(_new[cst.Float](value=text), node)
        if isinstance(value, complex):
            return self.at(_new[cst.Imaginary](value=text), node)
        return self.strings(node, text)

    def expr_JoinedStr(self, node: ast.JoinedStr) -> Any:
        return self.strings(node, self.positions.text_of(node))

    def strings(self, node: ast.expr, text: str) -> Any:
        """One string literal, or libcst's right-nested ConcatenatedString of several."""
        if _is_one_literal(text):
            return self.at(self.string_token(text, (node.lineno, node.col_offset)), node)
        try:
            tokens = _string_tokens(text)
        except (tokenize.TokenError, SyntaxError) as error:
            raise NotModelledError("a string literal tokenize cannot split") from error
        if not tokens:
            raise NotModelledError("a string without a string token")
        segment = text.splitlines(keepends=True)
        parts = []
        for token in tokens:
            span = _token_span(node.lineno, node.col_offset, segment, token)
            parts.append(self.at(self.string_token(token.string, span[:2]), span))
        found = parts[-1]
        for part in reversed(parts[:-1]):
            found = _new[cst.ConcatenatedString](left=part, right=found)
        if len(parts) > 1:
            self.at(found, node)
        return found

    def string_token(self, token: str, start: tuple[int, int]) -> Any:
        """A string or f-string literal ``token``, which starts at ``start`` (line, byte column)."""
        prefix, quote = fstrings.delimiters(token)
        if "f" not in prefix.lower():
            return _new[cst.SimpleString](value=token)
        try:
            parts = fstrings.parts(token)
        except ValueError as error:
            raise NotModelledError("an f-string the scan does not split") from error
        return _new[cst.FormattedString](parts=self.formatted_parts(token, start, parts),
                                         start=prefix + quote, end=quote)

    def formatted_parts(self, token: str, start: tuple[int, int],
                        parts: Sequence[fstrings.Text | fstrings.Field]) -> list[cst.BaseFormattedStringContent]:
        converted: list[cst.BaseFormattedStringContent] = []
        for part in parts:
            if isinstance(part, fstrings.Text):
                converted.append(_new[cst.FormattedStringText](value=token[part.start : part.end]))
                continue
            expression = self.expr(_field_expression(token, start, part))
            spec = self.formatted_parts(token, start, part.spec) if part.spec is not None else None
            converted.append(_new[cst.FormattedStringExpression](
                expression=expression, conversion=part.conversion, format_spec=spec,
                equal=_new[cst.AssignEqual]() if part.equal else None))
        return converted

    def expr_Attribute(self, node: ast.Attribute) -> cst.Attribute:
        size = len(node.attr.encode())
        attr = self.at(_new[cst.Name](value=node.attr),
                       (node.end_lineno, node.end_col_offset - size, node.end_lineno, node.end_col_offset))
        return self.at(_new[cst.Attribute](value=self.expr(node.value), attr=attr), node)

    def expr_Call(self, node: ast.Call) -> cst.Call:
        slot = self.opened()
        return self.closed(slot, self.at(_new[cst.Call](func=self.expr(node.func), args=self.arguments(node)), node))

    def expr_BinOp(self, node: ast.BinOp) -> cst.BinaryOperation:
        slot = self.opened()
        return self.closed(slot, self.at(_new[cst.BinaryOperation](
            left=self.expr(node.left), operator=_OPERATORS[type(node.op)], right=self.expr(node.right)), node))

    def expr_UnaryOp(self, node: ast.UnaryOp) -> cst.UnaryOperation:
        return self.at(_new[cst.UnaryOperation](operator=_OPERATORS[type(node.op)],
                                                expression=self.expr(node.operand)), node)

    def expr_BoolOp(self, node: ast.BoolOp) -> cst.BooleanOperation:
        """``a and b and c`` is libcst's left-nested ((a and b) and c)."""
        operator = _OPERATORS[type(node.op)]
        found = self.expr(node.values[0])
        for value in node.values[1:]:
            found = self.at(_new[cst.BooleanOperation](left=found, operator=operator, right=self.expr(value)),
                            _between(node.values[0], value))
        return found

    def expr_Compare(self, node: ast.Compare) -> cst.Comparison:
        left = self.expr(node.left)
        targets = [_new[cst.ComparisonTarget](operator=_OPERATORS[type(op)], comparator=self.expr(c))
                   for op, c in zip(node.ops, node.comparators, strict=True)]
        return self.at(_new[cst.Comparison](left=left, comparisons=targets), node)

    def expr_IfExp(self, node: ast.IfExp) -> cst.IfExp:
        body = self.expr(node.body)  # written first: ``body if test else orelse``
        return self.at(_new[cst.IfExp](body=body, test=self.expr(node.test), orelse=self.expr(node.orelse)), node)

    def expr_NamedExpr(self, node: ast.NamedExpr) -> cst.NamedExpr:
        return self.at(_new[cst.NamedExpr](target=self.expr(node.target), value=self.expr(node.value)), node)

    def expr_Lambda(self, node: ast.Lambda) -> cst.Lambda:
        slot = self.opened()
        return self.closed(slot, self.at(_new[cst.Lambda](params=self.parameters(node.args),
                                                          body=self.expr(node.body)), node))

    def expr_Await(self, node: ast.Await) -> cst.Await:
        return self.at(_new[cst.Await](expression=self.expr(node.value)), node)

    def expr_Yield(self, node: ast.Yield) -> cst.Yield:
        return self.at(_new[cst.Yield](value=self.optional(node.value)), node)

    def expr_YieldFrom(self, node: ast.YieldFrom) -> cst.Yield:
        item = self.at(_new[cst.From](item=self.expr(node.value)), node.value)
        return self.at(_new[cst.Yield](value=item), node)

    def expr_Starred(self, node: ast.Starred) -> cst.StarredElement:
        return self.at(_new[cst.StarredElement](value=self.expr(node.value)), node)

    def element(self, node: ast.expr) -> cst.BaseElement:
        if isinstance(node, ast.Starred):
            return self.expr_Starred(node)
        return self.at(_new[cst.Element](value=self.expr(node)), node)

    def expr_Tuple(self, node: ast.Tuple) -> cst.Tuple:
        elements = [self.element(e) for e in node.elts]
        if not node.elts:
            return self.at(_new[cst.Tuple](elements=elements), node)
        line, column, end_line, end_column = _between(node.elts[0], node.elts[-1])
        if self.lines[end_line - 1].encode()[end_column : end_column + 1] == b",":
            end_column += 1  # libcst's tuple ends after a trailing comma
        found = self.at(_new[cst.Tuple](elements=elements), (line, column, end_line, end_column))
        self.positions.written[id(found)] = _span(node)  # with its parentheses, if it has any
        return found

    def expr_List(self, node: ast.List) -> cst.List:
        return self.at(_new[cst.List](elements=[self.element(e) for e in node.elts]), node)

    def expr_Set(self, node: ast.Set) -> cst.Set:
        return self.at(_new[cst.Set](elements=[self.element(e) for e in node.elts]), node)

    def expr_Dict(self, node: ast.Dict) -> cst.Dict:
        elements: list[cst.BaseDictElement] = []
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                elements.append(_new[cst.StarredDictElement](value=self.expr(value)))
            else:
                elements.append(_new[cst.DictElement](key=self.expr(key), value=self.expr(value)))
        return self.at(_new[cst.Dict](elements=elements), node)

    def comprehension(self, generators: Sequence[ast.comprehension]) -> cst.CompFor:
        """libcst nests each ``for`` in the one before it; they are converted in the order written."""
        parts = [(self.expr(g.target), self.expr(g.iter), [_new[cst.CompIf](test=self.expr(t)) for t in g.ifs],
                  _new[cst.Asynchronous]() if g.is_async else None) for g in generators]
        inner = None
        for target, iterated, ifs, asynchronous in reversed(parts):
            inner = _new[cst.CompFor](target=target, iter=iterated, ifs=ifs, inner_for_in=inner,
                                      asynchronous=asynchronous)
        assert inner is not None
        return inner

    def expr_ListComp(self, node: ast.ListComp) -> cst.ListComp:
        elt = self.expr(node.elt)
        return self.at(_new[cst.ListComp](elt=elt, for_in=self.comprehension(node.generators)), node)

    def expr_SetComp(self, node: ast.SetComp) -> cst.SetComp:
        elt = self.expr(node.elt)
        return self.at(_new[cst.SetComp](elt=elt, for_in=self.comprehension(node.generators)), node)

    def expr_GeneratorExp(self, node: ast.GeneratorExp) -> cst.GeneratorExp:
        elt = self.expr(node.elt)
        last = node.generators[-1]
        end = last.ifs[-1] if last.ifs else last.iter
        return self.at(_new[cst.GeneratorExp](elt=elt, for_in=self.comprehension(node.generators)),
                       _between(node.elt, end))

    def expr_DictComp(self, node: ast.DictComp) -> cst.DictComp:
        key, value = self.expr(node.key), self.expr(node.value)
        return self.at(_new[cst.DictComp](key=key, value=value, for_in=self.comprehension(node.generators)), node)

    def expr_Subscript(self, node: ast.Subscript) -> cst.Subscript:
        slot = self.opened()
        value, index = self.expr(node.value), node.slice
        if isinstance(index, ast.Tuple) and index.elts and not self._parenthesised(index):
            elements = [self.subscript_element(e) for e in index.elts]
        else:
            elements = [self.subscript_element(index)]
        return self.closed(slot, self.at(_new[cst.Subscript](value=value, slice=elements), node))

    def subscript_element(self, node: ast.expr) -> cst.SubscriptElement:
        if isinstance(node, ast.Slice):
            inner: Any = self.at(_new[cst.Slice](lower=self.optional(node.lower), upper=self.optional(node.upper),
                                                 step=self.optional(node.step)), node)
        elif isinstance(node, ast.Starred):
            raise NotModelledError("a starred subscript")
        else:
            inner = self.at(_new[cst.Index](value=self.expr(node)), node)
        return self.at(_new[cst.SubscriptElement](slice=inner), node)

    def _parenthesised(self, node: ast.Tuple) -> bool:
        """``x[(a, b)]``, not ``x[(a), b]``: the "(" that starts the tuple is not its first element's."""
        if self.lines[node.lineno - 1].encode()[node.col_offset : node.col_offset + 1] != b"(":
            return False
        return (node.lineno, node.col_offset) < _grouped(self.lines, _span(node.elts[0]))[:2]


def _name_items(names: Sequence[str]) -> list[cst.NameItem]:
    return [_new[cst.NameItem](name=_new[cst.Name](value=name)) for name in names]


# Python 3.12 tokenizes an f-string as FSTRING_START, its parts and FSTRING_END (PEP 701); 3.11 as one STRING.
_FSTRING_START, _FSTRING_END = getattr(tokenize, "FSTRING_START", None), getattr(tokenize, "FSTRING_END", None)


def _string_tokens(text: str) -> list[tokenize.TokenInfo]:
    """The string literals of an implicit concatenation, one token each, as Python 3.11 gives them:
    on 3.12 an f-string's tokens, nested f-strings and strings in its fields included, are joined
    into one STRING token spanning it (else ``'a' f"{b}"`` would read as ``'a'`` alone)."""
    lines = text.splitlines(keepends=True)
    found: list[tokenize.TokenInfo] = []
    depth, opened = 0, None
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == _FSTRING_START:
            depth, opened = depth + 1, opened if depth else token
        elif token.type == _FSTRING_END:
            depth -= 1
            if depth == 0 and opened is not None:
                found.append(opened._replace(type=tokenize.STRING, end=token.end,
                                             string=_between_places(lines, opened.start, token.end)))
        elif token.type == tokenize.STRING and depth == 0:
            found.append(token)
    return found


def _between_places(lines: Sequence[str], start: tuple[int, int], end: tuple[int, int]) -> str:
    """The text from ``start`` to ``end``, (row from 1, character column) places in ``lines``."""
    (row, column), (end_row, end_column) = start, end
    if row == end_row:
        return lines[row - 1][column:end_column]
    return lines[row - 1][column:] + "".join(lines[row : end_row - 1]) + lines[end_row - 1][:end_column]


def _is_one_literal(text: str) -> bool:
    """``text`` is a single string token (the common case, which skips tokenize):
    its opening quote closes it and appears nowhere in between."""
    prefix, quote = fstrings.delimiters(text)
    body = text[len(prefix):]
    inner = body[len(quote) : len(body) - len(quote)]
    return len(body) >= 2 * len(quote) and body.endswith(quote) and quote[0] not in inner and "\\" not in inner


@cache
def _methods(converter: type[_Converter], prefix: str) -> dict[type, Callable[..., Any]]:
    """``converter``'s methods named ``prefix`` + an ast class name, by that class: a dict
    lookup per node instead of building the name and looking it up."""
    return {getattr(ast, name.removeprefix(prefix)): getattr(converter, name)
            for name in dir(converter) if name.startswith(prefix) and hasattr(ast, name.removeprefix(prefix))}


def _field_expression(token: str, start: tuple[int, int], field: fstrings.Field) -> ast.expr:
    """The ast of an f-string field's expression, placed where its text is in the file
    (``token`` starts at ``start``, a line and a byte column)."""
    text = token[field.start : field.end]
    try:
        expression = ast.parse(f"({text})", mode="eval").body
    except (SyntaxError, ValueError) as error:
        raise NotModelledError("an f-string expression that does not parse alone") from error
    row = token.count("\n", 0, field.start) + 1
    line, column = _file_place(start, row, token[token.rfind("\n", 0, field.start) + 1 : field.start])
    # Parsed as "(text)", the text starts at column 1 of line 1.
    for node in ast.walk(expression):
        if hasattr(node, "end_lineno"):
            if node.lineno == 1:
                node.col_offset += column - 1
            if node.end_lineno == 1:
                node.end_col_offset += column - 1
            node.lineno += line - 1
            node.end_lineno += line - 1
    if isinstance(expression, ast.Tuple) and (expression.lineno, expression.col_offset) == (line, column - 1):
        # ``{a, b}``: the parentheses that made it parse are not the tuple's own.
        expression.lineno, expression.col_offset = expression.elts[0].lineno, expression.elts[0].col_offset
    return expression


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


class _Converted:
    """A function's conversion, kept to stand for the same text in a later tree.

    Model files repeat functions word for word (``rotate_half``, ``repeat_kv``, a
    ``forward`` copied into the next model), and a function's libcst tree depends on its
    text alone: where it sits changes only the lines of its spans. So a later tree takes
    this one's nodes, its spans moved to its lines, and its events renumbered. The nodes
    are shared between trees, never within one (``_Converter.placed``): every analysis
    keys on nodes of one tree, and lives as long as that tree.
    """

    def __init__(self, node: cst.FunctionDef, first: int, spans: dict[int, _Located],
                 written: dict[int, Span], events: list[Any], start: int, lines: Sequence[str]) -> None:
        self.node = node
        # Counted from the line the text starts on (``first``), and from ``events[0]``, whose
        # index in its tree's events is ``start``: nothing of that tree (``lines``) is kept.
        self.spans = _moved({key: _resolved(located, lines) for key, located in spans.items()}, -first)
        self.written = _moved(written, -first)
        self.events = [(node, end - start) for node, end in events]

    def place(self, converter: _Converter, first: int) -> None:
        """Record this function's spans and events in ``converter``, its text starting at line ``first``."""
        converter.spans.update(_moved(self.spans, first))
        converter.positions.written.update(_moved(self.written, first))
        offset = len(converter.events)
        converter.events.extend([(node, end + offset) for node, end in self.events])


def _moved(spans: Mapping[int, Span], lines: int) -> dict[int, Span]:
    """``spans`` moved ``lines`` lines down (up, for a negative count): a placed function has
    thousands, and one comprehension moves them without a call each."""
    return {key: (line + lines, column, end_line + lines, end_column)
            for key, (line, column, end_line, end_column) in spans.items()}


class _Repeated(dict[str, _Converted]):
    """The conversions of the functions seen more than once in this process, by their text.

    A function is kept the second time it is converted, not the first: most are never seen
    again, and keeping every one would keep alive, and have the collector scan, every tree
    of a worker (``collector``). The texts seen once are only strings, and both are bounded.
    """

    LIMIT = 512
    SEEN_LIMIT = 8192

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def offer(self, text: str, converted: Callable[[], _Converted]) -> None:
        """Note that ``text`` was converted; keep its conversion if it was converted before."""
        if text not in self.seen:
            if len(self.seen) >= self.SEEN_LIMIT:
                self.seen.clear()
            self.seen.add(text)
            return
        if len(self) >= self.LIMIT:
            del self[next(iter(self))]
        self[text] = converted()


_CONVERTED = _Repeated()


def _between(first: ast.AST, last: ast.AST) -> Span:
    return first.lineno, first.col_offset, last.end_lineno, last.end_col_offset  # type: ignore[attr-defined,return-value]


def _token_span(line: int, column: int, segment: Sequence[str], token: tokenize.TokenInfo) -> Span:
    """A token's span in the file, from its (row, character column) in ``segment``,
    the text's lines from byte ``column`` of ``line`` on."""
    (row, character), (end_row, end_character) = token.start, token.end
    return (*_file_place((line, column), row, segment[row - 1][:character]),
            *_file_place((line, column), end_row, segment[end_row - 1][:end_character]))


def _file_place(start: tuple[int, int], row: int, before: str) -> tuple[int, int]:
    """The file's (line, byte column) of a place in a text that starts at ``start`` in the file:
    on the text's line ``row`` (from 1), after the characters ``before`` on that line."""
    width = len(before.encode())
    return (start[0], start[1] + width) if row == 1 else (start[0] + row - 1, width)
