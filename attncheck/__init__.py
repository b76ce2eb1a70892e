"""attncheck: find the mistakes people make when they write attention by hand.

The static half (``attncheck.static``) reads code with libcst and never imports
torch; the dynamic half (``attncheck.dynamic``) runs the user's module in an
isolated child process against trusted float64 references.
"""

__version__ = "0.1.0"
