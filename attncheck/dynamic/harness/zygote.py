"""The zygote: a pristine warm process that forks every jailed child, so no child inherits a
byte of another student's data.

A child forked straight from a grading worker would inherit that worker's memory, where earlier
submissions' sources were read, linted and judged (freed memory is not cleared). The zygote is
a fresh interpreter that imports torch and the child's code once and then only ever reads
orders (paths and limits, one JSON line each) from its worker; it forks the jailed child
(``forked.enter_jail``), watches it with the sandbox's own watch (time limit from ready,
work-dir cap) and answers how it ended. The worker writes the request and reads the replies
itself, in the run folder. The zygote ends when its worker does: the order pipe closes (a death
signal would be tied to the thread that started it, not the worker).

Run as ``python -m attncheck.dynamic.harness.zygote ORDERS_FD ANSWERS_FD`` by ``Zygote``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from attncheck.dynamic.harness import sandbox
from attncheck.dynamic.harness.sandbox import Limits


class ZygoteGoneError(RuntimeError):
    """The zygote ended (killed from outside): the order got no answer."""


class Zygote:
    """The worker's handle on its zygote: ``fork(order)`` returns how the child ended."""

    def __init__(self) -> None:
        orders_read, orders_write = os.pipe()
        answers_read, answers_write = os.pipe()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sandbox.python_paths())}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "attncheck.dynamic.harness.zygote", str(orders_read), str(answers_write)],
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


def _serve(order: dict[str, Any], control: tuple[int, int]) -> dict[str, Any]:
    """Fork the jailed child of one order and watch it to its end."""
    from attncheck.dynamic.harness import forked

    limits = Limits(**order["limits"])
    workdir = Path(order["workdir"])
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        for fd in control:  # the child must not write answers for the next student
            os.close(fd)
        forked.enter_jail(order, limits)
    ending = sandbox.watch(forked.Forked(pid), workdir, limits, started)
    return asdict(ending)


def main(orders_fd: int, answers_fd: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker decides when to stop
    for name in ("inside.child", "inside.weights_capture", "harness.forked"):
        importlib.import_module(f"attncheck.dynamic.{name}")
    with os.fdopen(orders_fd, "r", encoding="utf-8") as orders, os.fdopen(answers_fd, "w", encoding="utf-8") as out:
        for line in orders:
            out.write(json.dumps(_serve(json.loads(line), (orders_fd, answers_fd))) + "\n")
            out.flush()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
