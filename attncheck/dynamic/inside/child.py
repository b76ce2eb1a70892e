"""The child process: the only code that imports the user's module.

Run as ``python -m attncheck.dynamic.inside.child HOME REQUEST_FD REPLIES_FD READY_FD [UID TASKS]``
by ``sandbox.run_child`` (with a uid when started by root in the jail: it drops to it before
anything else), or called as ``main`` in a child of ``grade``'s zygote. It reads the request and
the input tensors from its request pipe, confines itself (seccomp), says it is ready, loads the
user's module as its project would (``loading.importer``: through its package, whole or its
definitions only), and runs the entry function, writing each unit it yields at once to its
reply pipe (see ``channel``), so the parent keeps every unit finished before a later crash.
It ends with ``os._exit`` so user atexit handlers and stray threads cannot hold it open.
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True

import importlib  # noqa: E402  (bytecode writing must be off before any import)
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from types import ModuleType  # noqa: E402

import safetensors.torch  # noqa: E402
import torch  # noqa: E402

from attncheck.dynamic.harness import channel, jail, unshared  # noqa: E402
from attncheck.dynamic.harness.channel import ChildEnds  # noqa: E402
from attncheck.dynamic.harness.confine import install_filter  # noqa: E402
from attncheck.dynamic.inside.disguise import disguise  # noqa: E402
from attncheck.dynamic.loading import importer  # noqa: E402
from attncheck.dynamic.loading import request as loading_request  # noqa: E402

DEFAULT_ENTRY = "attncheck.dynamic.inside.executor:run"
TRACEBACK_FRAMES = 8
MESSAGE_CHARS = 300  # of an exception's text: its kind and the user's line matter, not a dumped file

# Bound now, before user code runs and can monkeypatch the modules they come from.
_write = os.write
_close = os.close
_dumps = json.dumps
_save_tensors = safetensors.torch.save
_exit = os._exit


class ReplyWriter:
    """Writes each reply whole, as one frame, to the reply pipe (``channel.reply_frame``)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.count = 0

    def write(self, facts: dict, tensors: dict[str, torch.Tensor]) -> None:
        blob = b""
        if tensors:
            widened, metadata = _numpy_ready(tensors)
            blob = _save_tensors(widened, metadata)
        self._send(channel.reply_frame(_dumps(channel.json_safe(facts)).encode(), blob))
        self.count += 1

    def done(self) -> None:
        """Mark the end: the entry ran through."""
        self._send(channel.done_frame(self.count))

    def _send(self, frame: bytes) -> None:
        view = memoryview(frame)
        while view:
            view = view[_write(self.fd, view) :]


def say_ready(fd: int) -> None:
    """Tell the parent that start-up is over (from now on the time limit runs), and close the pipe."""
    _write(fd, channel.READY_BYTE)
    _close(fd)


def _numpy_ready(tensors: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Contiguous CPU tensors; dtypes numpy lacks are widened exactly to float32."""
    ready: dict[str, torch.Tensor] = {}
    metadata: dict[str, str] = {}
    for name, tensor in tensors.items():
        value = tensor.detach().cpu()
        dtype = str(value.dtype).removeprefix("torch.")
        if dtype in channel.WIDENED_DTYPES:
            value = value.to(torch.float32)
            metadata[channel.ORIGINAL_DTYPE_PREFIX + name] = dtype
        ready[name] = value.contiguous().clone()
    return ready, metadata


def error_facts(unit: str, error: BaseException, user_file: Path) -> dict:
    """An error reply: type, message, the line in the user's file, the last frames."""
    frames = traceback.extract_tb(error.__traceback__)
    user_frames = [frame for frame in frames if Path(frame.filename) == user_file]
    line = user_frames[-1].lineno if user_frames else getattr(error, "lineno", None)
    if isinstance(error, SyntaxError) and Path(error.filename or "") != user_file:
        line = None
    facts = {
        "type": type(error).__name__,
        "message": _message(error),
        "line": line,
        # the frames' places, not their text: a message must never carry what the user's code read
        "traceback": "".join(traceback.format_list(frames[-TRACEBACK_FRAMES:])) + type(error).__name__,
    }
    if isinstance(error, ModuleNotFoundError) and error.name:
        facts["missing_module"] = error.name
    return {"unit": unit, "error": facts}


def _message(error: BaseException) -> str:
    if isinstance(error, SystemExit):
        return f"sys.exit({error.code!r}) called"
    return str(error)[:MESSAGE_CHARS]


def load_entry(spec: str) -> Callable[[ModuleType, dict, dict], Iterator[tuple[dict, dict]]]:
    module_name, _, function = spec.partition(":")
    return getattr(importlib.import_module(module_name), function)


def main(home: Path, ends: ChildEnds) -> None:
    os.chdir(home)
    # A write past RLIMIT_FSIZE becomes an OSError in user code rather than a kill.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    # Import the usual entry (the executor) while the parent still lints and plans, not after.
    importlib.import_module(DEFAULT_ENTRY.partition(":")[0])
    request, inputs_blob = channel.read_request(ends.request)  # started early: waits here for the work
    os.close(ends.request)
    how_to_load = request.get("load") or loading_request.from_disk(Path(request["module_path"]))
    user_file = Path(how_to_load["path"])
    inputs = safetensors.torch.load(inputs_blob)
    del inputs_blob
    entry = load_entry(request.get("entry", DEFAULT_ENTRY))
    writer = ReplyWriter(ends.replies)
    confinement = install_filter(shared_memory=bool(jail.gpu_nodes()))  # a GPU's driver may share memory
    print(f"confined: {confinement}", file=sys.stderr, flush=True)  # no name of the checker: user code may read it
    say_ready(ends.ready)
    disguise(user_file)  # as if its author ran it: no sign of the checker in argv or sys.modules
    try:
        loaded = importer.load(how_to_load)
    except BaseException as error:
        writer.write(error_facts("import", error, user_file), {})
        writer.done()
        return
    module = loaded.module
    if loaded.how:
        writer.write({"unit": "load", "how": loaded.how}, {})
    try:
        for facts, tensors in entry(module, request, inputs):
            writer.write(facts, tensors)
    except BaseException as error:
        writer.write(error_facts("entry", error, user_file), {})
    writer.done()


if __name__ == "__main__":
    if os.getpid() == 1:  # in bubblewrap (``--as-pid-1``): user code runs as pid 2, as in grade's jail
        unshared.split_init()
    if len(sys.argv) == 7:
        jail.drop_privileges(int(sys.argv[5]), int(sys.argv[6]))
    main(Path(sys.argv[1]), ChildEnds.from_args(sys.argv[2:5]))
    sys.stdout.flush()
    sys.stderr.flush()
    _exit(0)
