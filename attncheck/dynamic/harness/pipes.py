"""The parent's ends of a child's pipes (``channel``): the request goes in and the replies come
out while the caller watches the clock, never blocking on a child that stops reading or writing.
The child's stdout and stderr are pipes too (``Output``): kept for display, head and tail, in
memory; as files they were 256 MB each (RLIMIT_FSIZE) of the host's disk, outside the jail's
size-limited tmpfs.

``check`` (``sandbox.watch``) and ``grade``'s worker (``zygote_client``) both pump a ``Transfer``
from their own loop: each call of ``wait`` moves what the pipes allow, for at most its timeout,
and says which of the caller's other descriptors are readable. The ``ReadyPipe`` is apart since
in ``grade`` the zygote, which watches the child's clock, holds it, and the worker the others.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
from collections.abc import Sequence

from attncheck.dynamic.harness import channel
from attncheck.dynamic.harness.channel import Reply, ReplyStream

READ_BYTES = 1 << 20
OUTPUT_BYTES = 64_000  # of each output stream kept for display, half its head and half its tail
PIPE_BYTES = 1 << 20  # asked of the kernel for the reply pipe (fewer wake-ups for large tensors)
_READABLE = select.POLLIN | select.POLLHUP | select.POLLERR
_WRITABLE = select.POLLOUT | select.POLLHUP | select.POLLERR


class Output:
    """One output stream of the child, read from a pipe: its first and last ``limit // 2`` bytes,
    and how many bytes between them were left out."""

    def __init__(self, limit: int) -> None:
        self.fd, self.child_end = os.pipe()
        os.set_blocking(self.fd, False)
        self.half = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.skipped = 0

    def read(self) -> bool:
        """One read; False once the pipe is empty for now or ended (then closed)."""
        try:
            data = os.read(self.fd, READ_BYTES)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self.fd = _closed(self.fd)
            return False
        room = max(0, self.half - len(self.head))
        self.head += data[:room]
        self.tail += data[room:]
        if len(self.tail) > self.half:
            self.skipped += len(self.tail) - self.half
            del self.tail[: len(self.tail) - self.half]
        return True

    def text(self) -> str:
        """What was kept, as text; a line says how much was left out between head and tail."""
        head, tail = self.head.decode("utf-8", errors="replace"), self.tail.decode("utf-8", errors="replace")
        return head + tail if not self.skipped else f"{head}\n[... {self.skipped} bytes left out ...]\n{tail}"

    def close(self) -> None:
        self.child_end = _closed(self.child_end)
        self.fd = _closed(self.fd)


class Transfer:
    """The request, reply and output pipes of one child, from the parent's side.

    Made before the child starts (``child_request``, ``child_replies`` and the outputs'
    ``child_end`` are the ends it inherits, closed here by ``close_child_ends`` once it holds
    them); ``send`` queues the request.
    """

    def __init__(self, output_bytes: int = OUTPUT_BYTES) -> None:
        self.child_request, self.request = os.pipe()
        self.reply, self.child_replies = os.pipe()
        with contextlib.suppress(OSError, AttributeError):
            fcntl.fcntl(self.reply, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        os.set_blocking(self.request, False)
        os.set_blocking(self.reply, False)
        self.stdout, self.stderr = Output(output_bytes), Output(output_bytes)
        self.pending = memoryview(b"")
        self.stream = ReplyStream()

    @property
    def refused(self) -> str | None:
        return self.stream.refused

    @property
    def finished(self) -> bool:
        return self.stream.finished

    def close_child_ends(self) -> None:
        self.child_request = _closed(self.child_request)
        self.child_replies = _closed(self.child_replies)
        for output in (self.stdout, self.stderr):
            output.child_end = _closed(output.child_end)

    def send(self, data: bytes) -> None:
        """Queue the request frame; ``wait`` writes it as the child reads."""
        self.pending = memoryview(data)

    def wait(self, timeout_s: float, others: Sequence[int] = ()) -> set[int]:
        """Move what the pipes allow within ``timeout_s``; the ``others`` that are readable."""
        poller = select.poll()
        if self.pending and self.request >= 0:
            poller.register(self.request, select.POLLOUT)
        outputs = {output.fd: output for output in (self.stdout, self.stderr) if output.fd >= 0}
        for fd in [self.reply, *outputs, *others]:
            if fd >= 0:
                poller.register(fd, select.POLLIN)
        ready = set()
        for fd, events in poller.poll(max(0, int(timeout_s * 1000))):
            if fd == self.request and events & _WRITABLE:
                self._write()
            elif fd == self.reply and events & _READABLE:
                self._read()
            elif fd in outputs and events & _READABLE:
                outputs[fd].read()
            elif events & _READABLE:
                ready.add(fd)
        return ready

    def drain(self) -> None:
        """After the child ended: what is left in the reply and output pipes (up to their ends),
        then close all."""
        while self.reply >= 0 and self._read():
            pass
        for output in (self.stdout, self.stderr):
            while output.fd >= 0 and output.read():
                pass
        self.close()

    def replies(self) -> tuple[list[Reply], str | None]:
        return self.stream.replies()

    def close(self) -> None:
        self.close_child_ends()
        self.request = _closed(self.request)
        self.reply = _closed(self.reply)
        self.stdout.close()
        self.stderr.close()

    def _write(self) -> None:
        try:
            written = os.write(self.request, self.pending[: 1 << 20])
        except BlockingIOError:
            return
        except OSError:  # the child is gone (EPIPE): its end tells how
            self.pending = memoryview(b"")
            self.request = _closed(self.request)
            return
        self.pending = self.pending[written:]
        if not self.pending:
            self.request = _closed(self.request)  # the child reads no more than its frame

    def _read(self) -> bool:
        """One read from the reply pipe; False once it is empty for now or ended (then closed)."""
        try:
            data = os.read(self.reply, READ_BYTES)
        except BlockingIOError:
            return False
        except OSError:  # an end the kernel reports broken reads as the end
            data = b""
        if not data:
            self.reply = _closed(self.reply)
            return False
        self.stream.feed(data)
        return True


class ReadyPipe:
    """The child's one byte that says it is ready (torch imported, user code next)."""

    def __init__(self) -> None:
        self.fd, self.child_end = os.pipe()

    def close_child_end(self) -> None:
        self.child_end = _closed(self.child_end)

    def said_ready(self) -> bool:
        """After ``fd`` polled readable: whether the child wrote its byte (not only closed its end).

        Either way the pipe is done with: ``fd`` is closed and set to -1."""
        try:
            data = os.read(self.fd, 1)
        except OSError:
            data = b""
        self.fd = _closed(self.fd)
        return data == channel.READY_BYTE

    def close(self) -> None:
        self.close_child_end()
        self.fd = _closed(self.fd)


def _closed(fd: int) -> int:
    """Close ``fd`` when it is open; -1, the value of a closed end."""
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)
    return -1
