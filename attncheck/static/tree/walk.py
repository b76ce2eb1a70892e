"""Read-only traversal of libcst trees, several times faster than ``CSTNode.visit``.

libcst's own ``visit`` serves transformers as well as visitors, so it rebuilds
(and validates) every node it passes: on attention code that was most of the
time of a lint. Reading the fields directly (``node_fields``) visits the same
nodes in the same order, with the same ``visit_*``/``leave_*`` calls, and
builds nothing.

- ``visit(node, visitor)`` stands in for ``node.visit(visitor)`` with a
  ``CSTVisitor``: a ``visit_*`` returning False skips the children, ``leave_*``
  still runs.
- ``visit_batched(node, visitors, metadata)`` stands in for
  ``MetadataWrapper.visit_batched``: return values are ignored, as in libcst,
  and each visitor's ``metadata`` is the given mapping for the walk.

Whitespace, comments and punctuation are not walked unless a visitor asks for
their type: no rule looks at them, and they are half of all nodes. Such a walk
reads each node's children with ``subtree``'s reader for its class, which never
touches the trivia fields. A visitor that overrides ``on_visit`` sees every
node, as before.

A tree from ``fast_tree`` lists, as it is built, the nodes of the classes the
rules and the facts index ask about (calls, assignments, definitions...), in
the order a walk meets them. A walk whose callbacks ask about those classes
only replays that list (``_Walker.replay``): no node is read for its children.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import cache, cached_property

import libcst as cst

from attncheck.static.tree import node_fields, subtree
from attncheck.static.tree.node_fields import TRIVIA

Callback = Callable[[cst.CSTNode], object]
Reader = Callable[[cst.CSTNode], "list[cst.CSTNode]"]


def _callbacks(visitors: Iterable[cst.BatchableCSTVisitor]) -> dict[str, list[Callback]]:
    table: dict[str, list[Callback]] = {}
    for visitor in visitors:
        for name, method in visitor.get_visitors().items():
            table.setdefault(name, []).append(method)
    return table


Plan = tuple[tuple[Callback, ...], tuple[Callback, ...], Reader]
_TRIVIA_NAMES = frozenset(cls.__name__ for cls in TRIVIA)


class _Walker:
    """One walk: per node class, the callbacks to run and the reader of its children.

    ``every`` is an (on_visit, on_leave) pair run on every node, for a visitor
    that overrides those hooks; trivia are walked only when ``trivia`` is True
    or a callback asks for their type.
    """

    def __init__(self, table: Mapping[str, list[Callback]], *, prune: bool,
                 every: tuple[Callback, Callback] | None = None, trivia: bool = False) -> None:
        self.table = table
        self.prune = prune  # a visit callback returning False skips the children
        self.every = every
        self.asked = {name.split("_", 1)[1] for name in table}
        # Trivia nest (a comment sits in an EmptyLine): asking for any walks them all.
        self.trivia = trivia or not _TRIVIA_NAMES.isdisjoint(self.asked)
        self.plans: dict[type, Plan] = {}

    @cached_property
    def skip(self) -> frozenset[type]:
        """Leaves no callback asks for (a Name, a number: a third of all nodes): a walk does not
        even enter them (a replay has no use for this)."""
        if self.every is not None or self.trivia:
            return frozenset()
        return frozenset(c for c in _leaf_classes() if c.__name__ not in self.asked)

    def plan(self, cls: type) -> Plan:
        read = node_fields.children if self.trivia else subtree.reader(cls)
        if self.every is not None:
            found = ((self.every[0],), (self.every[1],), read)
        else:
            name = node_fields.libcst_class(cls).__name__
            found = (tuple(self.table.get(f"visit_{name}", ())), tuple(self.table.get(f"leave_{name}", ())), read)
        self.plans[cls] = found
        return found

    def run(self, node: cst.CSTNode) -> None:
        """The walk from ``node``: a replay of its events where it has them and they cover
        every class a callback asks for (``fast_tree.FastModule``), else a walk of the tree."""
        events = getattr(node, "events", None)
        if (events is not None and self.every is None and not self.trivia
                and self.asked <= {cls.__name__ for cls in node.EVENT_CLASSES}):  # type: ignore[attr-defined]
            self.replay(node, events)
        else:
            self.walk(node)

    def replay(self, root: cst.CSTNode, events: list[tuple[cst.CSTNode, int]]) -> None:
        """The callbacks a walk from ``root`` would run, from the nodes under it it would run
        them on, in pre-order, each with the index past its subtree: where a pruned walk
        resumes, and where its ``leave_*`` callbacks run. The loop runs each event's callbacks
        itself: a call of a method per event was most of a replay's own cost."""
        count = len(events)
        plans, plan, prune = self.plans, self.plan, self.prune
        visits, leaves, _ = plans.get(type(root)) or plan(type(root))
        pending: list[tuple[int, tuple[Callback, ...], cst.CSTNode]] = [(count, leaves, root)] if leaves else []
        at = 0 if self._visit(root, visits) else count
        while at < count:
            node, end = events[at]
            while pending and pending[-1][0] <= at:
                self._leave(pending.pop())
            visits, leaves, _ = plans.get(type(node)) or plan(type(node))
            if leaves:
                pending.append((end, leaves, node))
            at += 1
            for callback in visits:  # every callback runs, as in libcst, even after one said no
                if callback(node) is False and prune:
                    at = end
        while pending:
            self._leave(pending.pop())

    def _visit(self, node: cst.CSTNode, visits: tuple[Callback, ...]) -> bool:
        """Run ``node``'s visit callbacks; whether the walk goes into it (every callback runs,
        as in libcst, even after one has said no)."""
        descend = True
        for callback in visits:
            if callback(node) is False and self.prune:
                descend = False
        return descend

    @staticmethod
    def _leave(entry: tuple[int, tuple[Callback, ...], cst.CSTNode]) -> None:
        _, leaves, node = entry
        for callback in leaves:
            callback(node)

    def walk(self, root: cst.CSTNode) -> None:
        """The walk of the tree from ``root``, in pre-order with each node's ``leave_*`` callbacks
        after its subtree. A loop over a stack, not a recursion: Python parses nesting (a sum
        of a thousand terms, a chain of a thousand calls) far deeper than its stack allows."""
        plans, plan, skip = self.plans, self.plan, self.skip
        # A node still to enter, or (its leave callbacks, the node) once its children are pushed.
        stack: list[cst.CSTNode | tuple[tuple[Callback, ...], cst.CSTNode]] = [root]
        while stack:
            node = stack.pop()
            if type(node) is tuple:
                leaves, left = node
                for callback in leaves:
                    callback(left)
                continue
            visits, leaves, read = plans.get(type(node)) or plan(type(node))
            if leaves:
                stack.append((leaves, node))
            if self._visit(node, visits):
                stack.extend(reversed([child for child in read(node) if type(child) not in skip]))


@cache
def _leaf_classes() -> frozenset[type]:
    """The node classes whose nodes have no children but trivia."""
    return frozenset(cls for cls in node_fields.node_classes()
                     if cls not in TRIVIA and subtree.fields(cls) == ())


def _is_attribute_hook(name: str) -> bool:
    """``visit_Call_func``: a per-attribute callback, which this walker does not run."""
    return name.count("_") >= 2


@cache
def own_methods(cls: type) -> tuple[str, ...]:
    """The ``visit_*``/``leave_*`` methods ``cls`` really defines, sorted: read from the classes of
    its MRO that are not libcst's, whose some 1,600 no-op stubs a ``dir`` and a ``getattr`` of
    each name would read for every visitor class (20 ms for the rules, in each lint worker)."""
    names = {
        name
        for klass in cls.__mro__
        if not klass.__module__.startswith("libcst")
        for name in vars(klass)
        if name.startswith(("visit_", "leave_"))
    }
    return tuple(sorted(name for name in names if not getattr(getattr(cls, name), "_is_no_op", False)))


def visit(node: cst.CSTNode, visitor: cst.CSTVisitor, *, trivia: bool = True) -> None:
    """``node.visit(visitor)`` for a read-only ``CSTVisitor``.

    A visitor that overrides ``on_visit`` sees whitespace, comments and
    punctuation too, unless ``trivia`` is False (for one that only records the
    nodes it is given).
    """
    cls = type(visitor)
    base = cst.CSTVisitor
    if (
        cls.on_visit_attribute is not base.on_visit_attribute
        or cls.on_leave_attribute is not base.on_leave_attribute
        or any(_is_attribute_hook(name) for name in own_methods(cls))
    ):
        node.visit(visitor)
    elif cls.on_visit is not base.on_visit or cls.on_leave is not base.on_leave:
        _Walker({}, prune=True, every=(visitor.on_visit, visitor.on_leave), trivia=trivia).walk(node)
    else:
        _Walker({name: [getattr(visitor, name)] for name in own_methods(cls)}, prune=True).run(node)


def visit_batched(module: cst.Module, visitors: Iterable[cst.BatchableCSTVisitor],
                  metadata: Mapping[type, object]) -> None:
    """``MetadataWrapper(module).visit_batched(visitors)``, with ``metadata`` as
    every visitor's resolved metadata for the walk."""
    visitors = list(visitors)
    table = _callbacks(visitors)
    if any(_is_attribute_hook(name) for name in table):
        from libcst.metadata import MetadataWrapper

        MetadataWrapper(module, unsafe_skip_copy=True).visit_batched(visitors)
        return
    for visitor in visitors:
        visitor.metadata = metadata
    try:
        _Walker(table, prune=False).run(module)
    finally:
        for visitor in visitors:
            visitor.metadata = {}
