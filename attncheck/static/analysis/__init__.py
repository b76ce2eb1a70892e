"""What attention code means: one module per question the rules ask, none importing torch.

Layered, each importing only those before it: ``results`` (what the answers are) and
``syntax`` (what a node spells), ``flow`` (what a name can hold here), ``modules`` (which
submodules exist), ``shapes`` (which axis or size), ``masks`` (what a mask is), ``scores``
(where q·kᵀ and its softmax are), ``scales`` (what multiplies the scores), ``heads`` (where
heads are split and merged, which calls are projections); ``semantics.Semantics`` is the
facade over them that holds the per-file caches (``semantics.of(context)``). ``patterns``
(the per-function tracer, fill sites, head-layout calls) and ``rope`` (RoPE) answer their
own questions beside them.
"""
