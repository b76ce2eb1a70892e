"""Which known mistake explains a difference or a crash."""
