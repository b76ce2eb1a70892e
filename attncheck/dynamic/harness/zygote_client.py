"""The worker's side of its zygote (``zygote``): start it, send it orders, stop it.

Kept apart from the zygote's own code so that the forked jail (``forked``) can use the client
while the zygote imports the jail: no import cycle.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import multiprocessing.util
import os
import subprocess
import threading
from typing import Any

from attncheck.dynamic.harness import jail, neutral_frames

ZYGOTE_MODULE = "attncheck.dynamic.harness.zygote"


class ZygoteGoneError(RuntimeError):
    """The zygote ended (killed from outside): the order got no answer."""


class Zygote:
    """The worker's handle on its zygote: ``fork(order)`` returns how the child ended."""

    def __init__(self) -> None:
        orders_read, orders_write = os.pipe()
        answers_read, answers_write = os.pipe()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(jail.python_paths())}
        self.process = subprocess.Popen(
            [*neutral_frames.command(ZYGOTE_MODULE), str(orders_read), str(answers_write)],
            pass_fds=(orders_read, answers_write), stdin=subprocess.DEVNULL, env=env,
        )
        os.close(orders_read)
        os.close(answers_write)
        self.orders = os.fdopen(orders_write, "w", encoding="utf-8")
        self.answers = os.fdopen(answers_read, "r", encoding="utf-8")
        self.lock = threading.Lock()

    def alive(self) -> bool:
        return self.process.poll() is None

    def fork(self, order: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            try:
                self.orders.write(json.dumps(order) + "\n")
                self.orders.flush()
                line = self.answers.readline()
            except (BrokenPipeError, OSError) as error:
                raise ZygoteGoneError(f"the grading zygote ended: {error}") from error
            if not line:
                raise ZygoteGoneError("the grading zygote ended")
            return json.loads(line)

    def close(self) -> None:
        """Close the order pipe (the zygote's loop ends) and wait for it; a second call does nothing."""
        for stream in (self.orders, self.answers):
            with contextlib.suppress(OSError):
                stream.close()
        self.process.wait()


_zygote: Zygote | None = None


def start_zygote() -> Zygote:
    """This process's zygote, started now (it imports torch while the worker does) or again;
    stopped and waited for when this process ends, a pool worker included."""
    global _zygote
    if _zygote is None or not _zygote.alive():
        _zygote = Zygote()
        atexit.register(_zygote.close)
        multiprocessing.util.Finalize(_zygote, _zygote.close, exitpriority=10)  # workers skip atexit
    return _zygote
