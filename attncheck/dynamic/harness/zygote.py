"""The zygote: a pristine warm process that forks every jailed child, so no child inherits a
byte of another student's data.

A child forked straight from a grading worker would inherit that worker's memory, where earlier
submissions' sources were read, linted and judged (freed memory is not cleared). The zygote is
a fresh interpreter that imports torch and the child's code once and then only ever reads
orders (paths and limits, one JSON message each, with the child's request, reply and output
pipe ends attached by ``SCM_RIGHTS``) from its worker; it forks the jailed child (``forked.enter_jail``),
closes its copies of those ends, watches the child with the sandbox's own watch (time limit
from the ready byte, on a pipe of its own) and answers how it ended. The request and the
replies pass between the worker and the child alone: no student's data ever passes through
the zygote. The zygote ends when its worker does: the order socket closes (a death signal
would be tied to the thread that started it, not the worker); a child it is watching then is
killed at once, not left to run to its time limit.

Run as ``python -m attncheck.dynamic.harness.zygote CONTROL_FD`` by ``zygote_client.Zygote``.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import sys
import time
from dataclasses import asdict
from typing import Any

from attncheck.dynamic.harness import sandbox
from attncheck.dynamic.harness.channel import ChildEnds
from attncheck.dynamic.harness.pipes import ReadyPipe
from attncheck.dynamic.harness.sandbox import Limits

MAX_ORDER_BYTES = 1 << 20
ORDER_FDS = 4  # the child's ends of its request, reply, stdout and stderr pipes, in that order


def _serve(order: dict[str, Any], fds: list[int], control: int) -> dict[str, Any]:
    """Fork the jailed child of one order, with the pipe ends ``fds``, and watch it to its end."""
    from attncheck.dynamic.harness import forked

    limits = Limits(**order["limits"])
    ready = ReadyPipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(control)  # the child must not write answers for the next student
        os.close(ready.fd)
        forked.enter_jail(order, limits, ChildEnds(fds[0], fds[1], ready.child_end), (fds[2], fds[3]))
    for fd in fds:
        os.close(fd)
    ready.close_child_end()
    try:
        ending = sandbox.watch(forked.Forked(pid), ready, limits, started, abandoned_by=control)
    finally:
        ready.close()
    return asdict(ending)


def main(control_fd: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker decides when to stop
    for name in ("inside.child", "inside.weights_capture", "harness.forked"):
        importlib.import_module(f"attncheck.dynamic.{name}")
    with socket.socket(fileno=control_fd) as control:
        while True:
            message, fds, _flags, _address = socket.recv_fds(control, MAX_ORDER_BYTES, ORDER_FDS)
            if not message:
                break
            if len(fds) != ORDER_FDS:  # never from our worker: refuse rather than fork without pipes
                for fd in fds:
                    os.close(fd)
                control.send(json.dumps({"returncode": 1}).encode())
                continue
            control.send(json.dumps(_serve(json.loads(message), fds, control_fd)).encode())


if __name__ == "__main__":
    main(int(sys.argv[1]))
