"""How to build and call a target, and which recorded layer is Q, K, V and the output projection."""
