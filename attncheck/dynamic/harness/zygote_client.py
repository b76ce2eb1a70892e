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
import socket
import subprocess
import threading
from typing import Any

from attncheck.dynamic.harness import jail, neutral_frames
from attncheck.dynamic.harness.pipes import Transfer

ZYGOTE_MODULE = "attncheck.dynamic.harness.zygote"
MAX_ANSWER_BYTES = 1 << 16
WAIT_S = 1.0  # between looks at the zygote while the pipes are quiet


class ZygoteGoneError(RuntimeError):
    """The zygote ended (killed from outside): the order got no answer."""


class Zygote:
    """The worker's handle on its zygote: ``fork(order, transfer)`` returns how the child ended."""

    def __init__(self) -> None:
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(jail.python_paths())}
        self.process = subprocess.Popen(
            [*neutral_frames.command(ZYGOTE_MODULE), str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env,
        )
        theirs.close()
        self.lock = threading.Lock()

    def alive(self) -> bool:
        return self.process.poll() is None

    def fork(self, order: dict[str, Any], transfer: Transfer) -> dict[str, Any]:
        """Have the zygote fork the child of ``order`` with ``transfer``'s child ends; move the
        request, the replies and its output while it runs; how it ended."""
        with self.lock:
            try:
                socket.send_fds(self.control, [json.dumps(order).encode()],
                                [transfer.child_request, transfer.child_replies, transfer.stdout.child_end,
                                 transfer.stderr.child_end])
            except OSError as error:
                raise ZygoteGoneError(f"the grading zygote ended: {error}") from error
            transfer.close_child_ends()
            while self.control.fileno() not in transfer.wait(WAIT_S, [self.control.fileno()]):
                pass
            try:
                answer = self.control.recv(MAX_ANSWER_BYTES)
            except OSError as error:
                raise ZygoteGoneError(f"the grading zygote ended: {error}") from error
            transfer.drain()
            if not answer:
                raise ZygoteGoneError("the grading zygote ended")
            return json.loads(answer)

    def close(self) -> None:
        """Close the order socket (the zygote's loop ends) and wait for it; a second call does nothing."""
        with contextlib.suppress(OSError):
            self.control.close()
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
