"""Make the child look like its author's own run before user code is imported.

Code that can tell it is being checked can behave only then (return the reference's output
under the checker and its own elsewhere). So, once the child's own code is loaded and bound:

- no module of the checker is left in ``sys.modules`` (the child's code keeps running from the
  objects it already holds; it imports nothing of attncheck later), and ``__main__`` is a fresh
  module rather than the child's or the zygote's;
- the frames below user code name no file or function of the checker: its code was loaded
  under ``<stem>`` file names with its functions named ``_`` (``harness.neutral_frames``), and
  here its modules' globals (what ``frame.f_globals`` shows: ``__name__``, ``__file__``,
  ``__spec__``, ``__loader__``) and its classes' and functions' ``__module__`` take the same
  neutral name;
- ``sys.argv`` and ``sys.orig_argv`` are ``python FILE``, and so is ``/proc/self/cmdline``: the
  command line in the process's own memory is overwritten in place (as ``setproctitle`` does);
  pid 1 of its namespace, the waiter above it, is plain ``python`` (``unshared.split_init``).

Not hidden here: the ``<stem>`` names themselves (a file ``<executor>``, importable under that
name for torch.compile, see ``_neutralise``), and the recorder's function mode on torch's mode
stack while the plain run records. The inputs, weights and default dtype are float32, as in a
user's own test (``probes.precision``).
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

from attncheck.dynamic.harness.neutral_frames import alias, is_checker_module, neutral_name
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
    """The module's globals (``frame.f_globals`` of its frames) name nothing of the checker.

    ``__name__``, and the ``__module__`` of the classes and functions it defines, become ``<stem>``
    too; torch.compile imports a function mode's class again by its ``__module__`` (the recorder's,
    under ``flex_attention``), so that name imports this module (``neutral_frames.alias``). No user
    module can be named ``<stem>``: none is shadowed."""
    name = getattr(module.__spec__, "name", None) or module.__name__
    stem = neutral_name(name)
    own = {name, module.__name__}  # run as a program, its classes say ``__main__``
    for value in list(vars(module).values()):
        if isinstance(value, (type, types.FunctionType)) and getattr(value, "__module__", None) in own:
            value.__module__ = stem
    module.__dict__.update(__name__=stem, __file__=stem, __cached__=None, __spec__=None, __loader__=None)
    if hasattr(module, "__path__"):
        module.__path__ = []
    alias(stem, module)
