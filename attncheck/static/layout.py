"""Where each top-level statement of a parsed module starts, without generating code.

libcst has no positions: ``PositionProvider`` generates the code of the whole
module while tracking lines and columns, and that tracked code generation cost
more than parsing on attention files. But a finding needs the positions of one
top-level statement only, and where a statement starts can be had from
Python's own parser, which runs in C: the line of its first token (the first
decorator of a decorated definition) less the blank and comment lines libcst
gives the statement. ``Layout`` then

- generates positions for one statement at a time, starting at its line, and
  checks the generated text against the parsed text at that line (any
  disagreement, and every node outside the statements, falls back to the
  whole-module provider, so positions are always libcst's own), and
- gives the text of a top-level statement as a slice of the parsed text.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from functools import cached_property

import libcst as cst
from libcst._position import CodeRange
from libcst.metadata.position_provider import PositionProvider, PositionProvidingCodegenState

from attncheck.static import walk


class Layout:
    """The parsed ``text`` of ``module`` and the first line of each of its top-level statements."""

    def __init__(self, module: cst.Module, text: str) -> None:
        self.module = module
        self.text = text

    @cached_property
    def _line_offsets(self) -> list[int]:
        offsets = [0]
        position = self.text.find("\n")
        while position >= 0:
            offsets.append(position + 1)
            position = self.text.find("\n", position + 1)
        return offsets

    @cached_property
    def starts(self) -> list[int] | None:
        """The 1-based line each body statement's code starts on (leading blank and
        comment lines included), or None when Python's parser disagrees with libcst's."""
        try:
            tree = ast.parse(self.text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        python = tree.body
        starts: list[int] = []
        index = 0
        for statement in self.module.body:
            if index >= len(python):
                return None
            first = python[index]
            line = first.lineno
            decorators = getattr(first, "decorator_list", None)
            leading = len(statement.leading_lines)
            if decorators:
                line = decorators[0].lineno
                leading += len(statement.decorators[0].leading_lines) if statement.decorators else 0
            starts.append(line - leading)
            index += len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
        return starts if index == len(python) else None

    def statement_text(self, statement: cst.CSTNode) -> str:
        """``module.code_for_node(statement)`` for a top-level statement, sliced from the text."""
        index = self._index_of_statement(statement)
        starts = self.starts
        if index is None or starts is None or not self.module.has_trailing_newline:
            return self.module.code_for_node(statement)
        begin = self._line_offsets[starts[index] - 1]
        if index + 1 < len(starts):
            end = self._line_offsets[starts[index + 1] - 1]
        else:
            end = self._line_offsets[len(self._line_offsets) - 1 - len(self.module.footer)]
            if not self.text.endswith("\n"):
                return self.module.code_for_node(statement)
        return self.text[begin:end]

    def _index_of_statement(self, statement: cst.CSTNode) -> int | None:
        return next((i for i, s in enumerate(self.module.body) if s is statement), None)

    def positions(self) -> Mapping[cst.CSTNode, CodeRange]:
        """What ``PositionProvider`` gives for the module, generated a statement at a time."""
        return _Positions(self)


class _Positions(Mapping[cst.CSTNode, CodeRange]):
    """Positions of the nodes of each top-level statement, generated on first request."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.computed: dict[cst.CSTNode, CodeRange] = {}
        self.done: set[int] = set()
        self.whole: Mapping[cst.CSTNode, CodeRange] | None = None

    @cached_property
    def owner(self) -> dict[cst.CSTNode, int]:
        """Every node of the body (punctuation and whitespace too) -> its statement's index."""
        table: dict[cst.CSTNode, int] = {}
        for index, statement in enumerate(self.layout.module.body):
            stack: list[cst.CSTNode] = [statement]
            while stack:
                node = stack.pop()
                table[node] = index
                stack.extend(walk.children(node))
        return table

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        if self.whole is not None:
            return self.whole[node]
        index = self.owner.get(node)
        if index is None:
            if node is self.layout.module or node in self.outside:
                return self._fall_back()[node]
            raise KeyError(node)  # not in the tree: a node facts.py built
        if index not in self.done and not self._generate(index):
            return self._fall_back()[node]
        return self.computed[node]

    @cached_property
    def outside(self) -> set[cst.CSTNode]:
        """The nodes of the module's header and footer, which no statement holds."""
        module = self.layout.module
        found: set[cst.CSTNode] = set()
        stack: list[cst.CSTNode] = [*module.header, *module.footer]
        while stack:
            node = stack.pop()
            found.add(node)
            stack.extend(walk.children(node))
        return found

    def _generate(self, index: int) -> bool:
        """Generate statement ``index`` from its line; False when its text is not there."""
        layout = self.layout
        starts = layout.starts
        if starts is None:
            return False
        module = layout.module
        provider = PositionProvider()
        state = PositionProvidingCodegenState(
            default_indent=module.default_indent, default_newline=module.default_newline, provider=provider,
        )
        start = starts[index]
        offsets = layout._line_offsets
        if not 1 <= start <= len(offsets):
            return False
        state.line = start
        module.body[index]._codegen(state)
        if not layout.text.startswith("".join(state.tokens), offsets[start - 1]):
            return False
        self.computed.update(provider._computed)
        self.done.add(index)
        return True

    def _fall_back(self) -> Mapping[cst.CSTNode, CodeRange]:
        from libcst.metadata import MetadataWrapper

        self.whole = PositionProvider()._gen(MetadataWrapper(self.layout.module, unsafe_skip_copy=True))
        return self.whole

    def __iter__(self) -> Iterator[cst.CSTNode]:
        return iter(self._fall_back())

    def __len__(self) -> int:
        return len(self._fall_back())
