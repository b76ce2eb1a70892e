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

Run as ``python -m attncheck.dynamic.harness.zygote ORDERS_FD ANSWERS_FD`` by ``zygote_client.Zygote``.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from attncheck.dynamic.harness import sandbox
from attncheck.dynamic.harness.sandbox import Limits


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
