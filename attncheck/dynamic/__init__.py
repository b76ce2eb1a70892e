"""Dynamic checks: run the user's attention in an isolated child process and
judge its float32 outputs, in the parent, against trusted float64 references."""
