"""attncheck: find the mistakes people make when they write attention by hand.

The static half (``attncheck.static``) reads code with libcst and never imports
torch; the dynamic half (``attncheck.dynamic``) runs the user's module in an
isolated child process against trusted float64 references.

The Python API (``attncheck.check``, ``attncheck.assert_attention``) is in
``attncheck.api``; the pytest plugin (``pytest --attncheck``) in
``attncheck.pytest_plugin``.
"""

from __future__ import annotations

from typing import Any

from attncheck.version import __version__

__all__ = ["Report", "__version__", "assert_attention", "check"]


def __getattr__(name: str) -> Any:
    """``attncheck.check``, ``attncheck.assert_attention`` and ``attncheck.Report``, imported on first
    use: ``import attncheck`` (every command line run, the pytest plugin) stays cheap."""
    if name in ("check", "assert_attention", "Report"):
        from attncheck import api

        return getattr(api, name)
    raise AttributeError(f"module 'attncheck' has no attribute {name!r}")
