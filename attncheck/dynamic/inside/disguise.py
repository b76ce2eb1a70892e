"""Make the child look like its author's own run before user code is imported.

Code that can tell it is being checked can behave only then (return the reference's output
under the checker and its own elsewhere). So, once the child's own code is loaded and bound:

- no module of the checker is left in ``sys.modules`` (the child's code keeps running from the
  objects it already holds; it imports nothing of attncheck later), and ``__main__`` is a fresh
  module rather than the child's or the zygote's;
- ``sys.argv`` and ``sys.orig_argv`` are ``python FILE``, and so is ``/proc/self/cmdline``: the
  command line in the process's own memory is overwritten in place (as ``setproctitle`` does);
  pid 1 of its namespace, the waiter above it, is plain ``python`` (``unshared.split_init``).

Not hidden: the code objects of the frames below the user's (``sys._getframe``, a traceback of
its own) still carry the checker's file names. (The inputs are float32, as in a user's own test.)
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

from attncheck.dynamic.harness.unshared import overwrite_command_line

PACKAGE = "attncheck"


def disguise(user_file: Path) -> None:
    """Every sign above removed; ``user_file`` is what the command line names."""
    for name in [name for name in sys.modules if name == PACKAGE or name.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    sys.modules["__main__"] = types.ModuleType("__main__")
    command = [Path(sys.executable).name, str(user_file)]
    sys.argv[:] = command[1:]
    sys.orig_argv[:] = command
    overwrite_command_line("\0".join(command).encode() + b"\0")
