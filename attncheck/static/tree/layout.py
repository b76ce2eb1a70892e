"""Where each top-level statement of a parsed module starts, without generating code.

libcst has no positions: ``PositionProvider`` generates the code of the whole
module while tracking lines and columns, and that tracked code generation cost
more than parsing on attention files. But a finding needs the positions of one
top-level statement only, and where a statement starts can be had from
Python's own parser, which runs in C: the line of its first token (the first
decorator of a decorated definition) less the blank and comment lines libcst
gives the statement. ``Layout`` then generates positions for one statement at a
time (a statement of a top-level class's body, else a top-level statement),
starting at its line, and checks the generated text against the parsed text at
that line (any disagreement, and punctuation, whitespace or the module itself,
falls back to the whole-module provider, so positions are always libcst's own).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Sequence
from functools import cached_property

import libcst as cst
from libcst._position import CodeRange
from libcst.metadata.position_provider import PositionProvider, PositionProvidingCodegenState

from attncheck.line_table import line_starts
from attncheck.static.tree import node_fields


class Layout:
    """The parsed ``text`` of ``module`` and the first line of each of its top-level statements."""

    def __init__(self, module: cst.Module, text: str) -> None:
        self.module = module
        self.text = text
        self._member_starts: dict[int, list[int] | None] = {}

    @cached_property
    def _line_offsets(self) -> list[int]:
        return line_starts(self.text)

    @cached_property
    def _tree(self) -> ast.Module | None:
        try:
            return ast.parse(self.text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None

    @cached_property
    def starts(self) -> list[int] | None:
        """The 1-based line each body statement's code starts on (leading blank and
        comment lines included), or None when Python's parser disagrees with libcst's."""
        return _starts(self.module.body, self._tree.body) if self._tree is not None else None

    def member_starts(self, index: int) -> list[int] | None:
        """``starts`` for the statements in the body of top-level class ``index``."""
        if index not in self._member_starts:
            self._member_starts[index] = self._find_member_starts(index)
        return self._member_starts[index]

    def _find_member_starts(self, index: int) -> list[int] | None:
        klass = self.module.body[index]
        if self._tree is None or not isinstance(klass, cst.ClassDef) or self.starts is None:
            return None
        python = self._tree.body[self._python_index[index]]
        if not isinstance(python, ast.ClassDef) or not isinstance(klass.body, cst.IndentedBlock):
            return None
        return _starts(klass.body.body, python.body)

    @cached_property
    def _python_index(self) -> list[int]:
        """For each body statement, the index of its first statement in Python's tree."""
        found, index = [], 0
        for statement in self.module.body:
            found.append(index)
            index += _width(statement)
        return found

    def positions(self) -> Mapping[cst.CSTNode, CodeRange]:
        """What ``PositionProvider`` gives for the module, generated a statement at a time."""
        return _Positions(self)


def _width(statement: cst.CSTNode) -> int:
    """How many statements of Python's tree a libcst statement is (``a = 1; b = 2`` is two)."""
    return len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1


def _starts(body: Sequence[cst.CSTNode], python: list[ast.stmt]) -> list[int] | None:
    """The first line of each of ``body``'s statements, from the matching statements of Python's tree."""
    starts: list[int] = []
    index = 0
    for statement in body:
        if index >= len(python):
            return None
        first = python[index]
        line = first.lineno
        leading = len(statement.leading_lines)  # type: ignore[attr-defined]
        decorators = getattr(first, "decorator_list", None)
        if decorators:
            line = decorators[0].lineno
            leading += len(statement.decorators[0].leading_lines) if statement.decorators else 0  # type: ignore[attr-defined]
        starts.append(line - leading)
        index += _width(statement)
    return starts if index == len(python) else None


Unit = tuple[int, int]  # (top-level statement, member of its class body or -1 for the whole statement)


class _Positions(Mapping[cst.CSTNode, CodeRange]):
    """Positions of the nodes of each top-level statement, generated on first request."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.computed: dict[cst.CSTNode, CodeRange] = {}
        self.done: set[int] = set()
        self.whole: Mapping[cst.CSTNode, CodeRange] | None = None

    @cached_property
    def owner(self) -> dict[cst.CSTNode, Unit]:
        """Every node of the body but punctuation and whitespace -> the smallest unit generated for it:
        a statement in a top-level class's body, else the top-level statement."""
        table: dict[cst.CSTNode, Unit] = {}
        for index, statement in enumerate(self.layout.module.body):
            members = statement.body.body if isinstance(statement, cst.ClassDef) and isinstance(
                statement.body, cst.IndentedBlock) else ()
            for number, member in enumerate(members):
                _index(member, (index, number), table)
            _index(statement, (index, -1), table)
        return table

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        if self.whole is not None:
            return self.whole[node]
        found = self.computed.get(node)
        if found is not None:
            return found
        unit = self.owner.get(node)
        if unit is None:
            if type(node) in node_fields.TRIVIA or node is self.layout.module:
                return self._fall_back()[node]
            raise KeyError(node)  # not in the tree: a node facts.py built
        if unit in self.done or not self._generate(unit):
            return self._fall_back()[node]
        return self.computed[node]

    def _generate(self, unit: Unit) -> bool:
        """Generate one unit from its line; False when its text is not there."""
        layout = self.layout
        module = layout.module
        index, member = unit
        statement: cst.CSTNode = module.body[index]
        indent: list[str] = []
        starts = layout.starts if member < 0 else layout.member_starts(index)
        if member >= 0:
            block = statement.body  # type: ignore[attr-defined]
            statement = block.body[member]
            indent = [module.default_indent if block.indent is None else block.indent]
        if starts is None:
            return False
        start = starts[index] if member < 0 else starts[member]
        offsets = layout._line_offsets
        if not 1 <= start <= len(offsets):
            return False
        provider = PositionProvider()
        state = PositionProvidingCodegenState(
            default_indent=module.default_indent, default_newline=module.default_newline, provider=provider,
        )
        state.line = start
        state.indent_tokens = indent
        statement._codegen(state)
        if not layout.text.startswith("".join(state.tokens), offsets[start - 1]):
            return False
        self.computed.update(provider._computed)
        self.done.add(unit)
        return True

    def _fall_back(self) -> Mapping[cst.CSTNode, CodeRange]:
        from libcst.metadata import MetadataWrapper

        self.whole = PositionProvider()._gen(MetadataWrapper(self.layout.module, unsafe_skip_copy=True))
        return self.whole

    def __iter__(self) -> Iterator[cst.CSTNode]:
        return iter(self._fall_back())

    def __len__(self) -> int:
        return len(self._fall_back())


def _index(root: cst.CSTNode, unit: Unit, table: dict[cst.CSTNode, Unit]) -> None:
    """Map ``root`` and its nodes (but punctuation and whitespace) not yet mapped to ``unit``."""
    stack = [root]
    trivia = node_fields.TRIVIA
    while stack:
        node = stack.pop()
        if node in table:
            continue
        table[node] = unit
        stack.extend(child for child in node_fields.children(node) if type(child) not in trivia)
