"""Straight-line blocks of statements, for the rules of results thrown away (ATT101, ATT205, ATT206).

A value bound in a block and bound again, or never returned, before the block ends is only
thrown away if nothing in between can read it: these rules look at one block at a time
(a function body, or the body of one ``if``/``for``/``with``/``try`` arm), never across arms.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import libcst as cst

from attncheck.static.tree import subtree


def straight_blocks(suite: cst.BaseSuite) -> Iterator[Sequence[cst.BaseStatement]]:
    """The statement lists of a function body and of the ``if``/``for``/``while``/``with``/``try``
    blocks inside it (not of nested definitions, which are visited on their own)."""
    if type(suite) is not cst.IndentedBlock:
        return
    yield suite.body
    for statement in suite.body:
        for inner in _suites(statement):
            yield from straight_blocks(inner)


def _suites(statement: cst.BaseStatement) -> list[cst.BaseSuite]:
    """The blocks a compound statement holds: its body, ``elif``/``else`` arms, handlers, ``finally``."""
    if type(statement) not in (cst.If, cst.For, cst.While, cst.With, cst.Try):
        return []
    found = [statement.body]
    other = getattr(statement, "orelse", None)
    while other is not None:
        found.append(other.body)
        other = other.orelse if type(other) is cst.If else None
    found += [handler.body for handler in getattr(statement, "handlers", ())]
    final = getattr(statement, "finalbody", None)
    return [*found, final.body] if final is not None else found


def bound(statement: cst.BaseStatement) -> tuple[str | None, cst.BaseExpression | None]:
    """``(name, value)`` of a simple ``name = value`` statement; ``(None, None)`` otherwise."""
    if type(statement) is not cst.SimpleStatementLine or len(statement.body) != 1:
        return None, None
    small = statement.body[0]
    if type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Name:
        return small.targets[0].target.value, small.value
    return None, None


def reads(node: cst.CSTNode, *names: str) -> bool:
    """Whether ``node`` reads any of ``names``."""
    return any(type(n) is cst.Name and n.value in names for n in subtree.preorder(node))


def rebinding(following: Sequence[cst.BaseStatement], name: str) -> cst.BaseExpression | None:
    """The value of the first later ``name = value`` of the block that does not read ``name``, when
    no statement before it reads it either; None when the name is read first (or never rebound).
    Most names are never bound again by a plain assignment: told without walking a statement."""
    last = max((position for position, statement in enumerate(following) if bound(statement)[0] == name), default=-1)
    for statement in following[: last + 1]:
        bound_name, value = bound(statement)
        if bound_name == name and value is not None and not reads(value, name):
            return value
        if reads(statement, name):
            return None
    return None
