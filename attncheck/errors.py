"""The error a user's configuration or options raise, in a module of its own.

Both the configuration loader and the declaration checks it calls raise it; keeping it here lets
``declarations`` raise it without importing ``config``, which imports ``declarations``.
"""


class ConfigError(ValueError):
    """A configuration or option that cannot be used, said in one sentence."""
