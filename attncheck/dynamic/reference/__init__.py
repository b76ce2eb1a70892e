"""The right answer and each known wrong one: the float64 references, RoPE, tolerances, low precision, the mutants."""
