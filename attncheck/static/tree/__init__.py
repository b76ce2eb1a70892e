"""The tree the rules read: a cheap, read-only libcst tree of only the attention-relevant lines.

Everything here exists for parse speed and knows nothing about attention; analyses
and rules sit above it (tree <- facts <- context <- analysis <- rules <- engine).
Nothing is imported here, so that importing one module (``regions`` in the
parent process, say) does not load the others. The public API, module by module:

- ``regions``: ``attention_regions(text) -> Reduced | None`` keeps the lines of a large
  file that can hold attention code; ``Reduced``, ``DEFINITION``, ``OTHER_BREAKS``, ``MIN_LINES``.
- ``fast_tree``: ``build(text) -> FastModule``, libcst's node classes built from ``ast``;
  ``NotModelledError`` and ``MissingPositionError`` say when to fall back on libcst's parser.
- ``layout``: ``Layout`` (positions of a libcst-parsed module without code generation)
  and ``line_starts``.
- ``walk``: ``visit`` and ``visit_batched``, read-only traversals faster than ``CSTNode.visit``.
- ``subtree``: ``preorder``, ``children``, ``Preorder``: pre-order reads that skip trivia.
- ``node_fields``: ``children``, ``child_fields``, ``TRIVIA``: which fields hold a node's
  children (generated into ``cst_fields``, which only ``node_fields`` and the tests read).
- ``construct``: ``new``, a libcst node without libcst's validation.
- ``fstrings`` and ``import_names``: helpers of ``fast_tree`` and ``regions``.

Names with a leading underscore are private to their module; only that module's own
tests reach them.
"""
