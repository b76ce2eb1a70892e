"""Make the child look like its author's own run before user code is imported.

Code that can tell it is being checked can behave only then (return the reference's output
under the checker and its own elsewhere). So, once the child's own code is loaded and bound:

- no module of the checker is left in ``sys.modules`` (the child's code keeps running from the
  objects it already holds; it imports nothing of attncheck later), and ``__main__`` is a fresh
  module rather than the child's or the zygote's;
- the frames below user code name no file of the checker: its code was loaded under ``<stem>``
  names (``harness.neutral_frames``), and here its modules' globals (what ``frame.f_globals``
  shows: ``__name__``, ``__file__``, ``__spec__``...) and the ``__module__`` of their classes and
  functions (``type(self).__module__`` of a frame's ``self``) take the same neutral stem;
- ``sys.argv`` and ``sys.orig_argv`` are ``python FILE``, and so is ``/proc/self/cmdline``: the
  command line in the process's own memory is overwritten in place (as ``setproctitle`` does);
  pid 1 of its namespace, the waiter above it, is plain ``python`` (``unshared.split_init``).

Not hidden here: the names of the functions below the user's (``call``, ``run``), and the
inputs' dtype (issue 16 makes them the module's own).
"""

from __future__ import annotations

import contextlib
import sys
import types
from pathlib import Path

from attncheck.dynamic.harness.neutral_frames import is_checker_module, neutral_name
from attncheck.dynamic.harness.unshared import overwrite_command_line


def disguise(user_file: Path) -> None:
    """Every sign above removed; ``user_file`` is what the command line names."""
    for name in [name for name in sys.modules if is_checker_module(name)]:
        _neutralise(sys.modules.pop(name))
    running = sys.modules.get("__main__")  # the child's or the zygote's, whose frame is below the user's
    if running is not None and is_checker_module(getattr(running.__spec__, "name", "") or ""):
        _neutralise(running)
    sys.modules["__main__"] = types.ModuleType("__main__")
    command = [Path(sys.executable).name, str(user_file)]
    sys.argv[:] = command[1:]
    sys.orig_argv[:] = command
    overwrite_command_line("\0".join(command).encode() + b"\0")


def _neutralise(module: types.ModuleType) -> None:
    """The module's globals, and the classes and functions it defines, under its neutral stem."""
    name = module.__name__
    stem = neutral_name(getattr(module.__spec__, "name", None) or name).strip("<>")  # not "__main__"'s
    for value in list(vars(module).values()):
        if isinstance(value, (type, types.FunctionType)) and getattr(value, "__module__", None) == name:
            with contextlib.suppress(AttributeError, TypeError):  # a C-level type keeps its own
                value.__module__ = stem
    module.__dict__.update(
        __name__=stem, __file__=f"<{stem}>", __cached__=None, __spec__=None, __loader__=None, __package__=""
    )
    if hasattr(module, "__path__"):
        module.__path__ = []
