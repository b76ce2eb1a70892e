"""The properties checked on a bound target: planned in the parent, run in the child, judged
in the parent on the child's replies."""
