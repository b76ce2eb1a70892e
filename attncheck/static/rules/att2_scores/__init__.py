"""ATT2xx: the scores q·kᵀ, their scale and their softmax. ``scale_conventions`` (which scale a
model means) and ``scale_fixes`` (the ``--fix`` edits of ATT201) are this family's own helpers."""
