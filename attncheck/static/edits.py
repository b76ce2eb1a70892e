"""Build the text edits of ``--fix`` from libcst nodes.

A fix replaces exactly the characters of the nodes it changes, so everything
else in the file (comments, spacing, quotes, line endings) stays byte-identical.
Positions come from ``PositionProvider``, which excludes a node's own wrapping
parentheses: a replaced operand keeps them. Nodes that facts.py synthesises
(tuple unpacking) have no position; the helpers return None for them and the
rule offers no fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst
from libcst.metadata import PositionProvider

from attncheck.findings import Edit
from attncheck.line_table import line_start, newline_of, next_line

if TYPE_CHECKING:
    from attncheck.static.rule import Rule


def span(rule: Rule, node: cst.CSTNode) -> tuple[int, int] | None:
    """The file offsets ``node`` covers, or None when it is not in the parsed tree."""
    position = rule.get_metadata(PositionProvider, node, None)
    if position is None:
        return None
    offset = rule.context.offset
    return offset(position.start.line, position.start.column), offset(position.end.line, position.end.column)


def replace(rule: Rule, node: cst.CSTNode, text: str) -> Edit | None:
    """Replace ``node``'s text with ``text``."""
    found = span(rule, node)
    return Edit(found[0], found[1], text) if found else None


def insert_after(rule: Rule, node: cst.CSTNode, text: str) -> Edit | None:
    """Insert ``text`` right after ``node``."""
    found = span(rule, node)
    return Edit(found[1], found[1], text) if found else None


def insert_in_parentheses(rule: Rule, call: cst.Call, text: str) -> Edit | None:
    """Insert ``text`` just after the opening parenthesis of ``call``'s arguments."""
    found = span(rule, call.func)
    if found is None:
        return None
    opening = rule.context.source.text.find("(", found[1])
    return Edit(opening + 1, opening + 1, text) if opening >= 0 else None


def complete(*edits: Edit | None) -> tuple[Edit, ...]:
    """All of ``edits``, or none when any could not be built: a fix goes in whole or not at all."""
    if any(edit is None for edit in edits):
        return ()
    return tuple(edit for edit in edits if edit is not None)


def module_name(rule: Rule, module: str) -> tuple[str, tuple[Edit, ...]] | None:
    """How the file names ``module`` at the top level, with the edit adding ``import module`` if missing.

    ``("math", ())`` when ``import math`` is there, ``("m", ())`` for ``import math
    as m``, ``("math", (insert,))`` when no top-level import binds it. None when
    the name is already bound to something else by an import, where adding
    the import would shadow it.
    """
    body = rule.context.module.body
    for statement in _imports(body):
        for small in statement.body:
            if not isinstance(small, cst.Import):
                continue
            for alias in small.names:
                name = rule.context.module.code_for_node(alias.name)
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name) and name == module:
                    return alias.asname.name.value, ()
                if alias.asname is None and (name == module or name.startswith(module + ".")):
                    return module, ()
    if rule.context.facts.aliases.get(module, module) != module:
        return None
    insert = _import_edit(rule, body, f"import {module}")
    return (module, (insert,)) if insert is not None else None


def _imports(body: tuple[cst.BaseStatement, ...] | list[cst.BaseStatement]) -> list[cst.SimpleStatementLine]:
    return [
        statement
        for statement in body
        if isinstance(statement, cst.SimpleStatementLine)
        and any(isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body)
    ]


def _import_edit(rule: Rule, body: tuple[cst.BaseStatement, ...] | list[cst.BaseStatement], line: str) -> Edit | None:
    """Insert ``line`` after the last top-level import, else after the docstring, else first."""
    text = rule.context.source.text
    newline = newline_of(text)
    imports = _imports(body)
    anchor = imports[-1] if imports else (body[0] if body and _is_docstring(body[0]) else None)
    if anchor is None:
        first = span(rule, body[0]) if body else (0, 0)
        if first is None:
            return None
        start = line_start(text, first[0])
        return Edit(start, start, line + newline)
    found = span(rule, anchor)
    if found is None:
        return None
    following = next_line(text, found[1])
    if following is None:
        return Edit(len(text), len(text), newline + line + newline)
    return Edit(following, following, line + newline)


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )
