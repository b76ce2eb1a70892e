"""A jail's pid 1 is bound to die with the process that made it (PR_SET_PDEATHSIG), but only from the
moment it sets the signal, after the fork: it then checks that its parent still holds the pipe it never
writes, since a parent that died in between would leave a jail nothing stops (one was found alive 52
minutes after its run, a hang loop under its namespace's pid 1)."""

from __future__ import annotations

import os

from attncheck.dynamic.harness.unshared import orphaned


def test_a_pipe_whose_writer_is_open_says_the_parent_lives() -> None:
    alive, held = os.pipe()
    try:
        assert not orphaned(alive)
    finally:
        os.close(alive)
        os.close(held)


def test_a_pipe_whose_every_writer_closed_says_the_parent_died() -> None:
    alive, held = os.pipe()
    os.close(held)
    try:
        assert orphaned(alive)
    finally:
        os.close(alive)


def test_a_writer_that_exits_leaves_the_reader_orphaned() -> None:
    alive, held = os.pipe()
    pid = os.fork()
    if pid == 0:  # the parent's stand-in: holds the write end, then dies
        os.close(alive)
        os._exit(0)
    os.close(held)
    os.waitpid(pid, 0)
    try:
        assert orphaned(alive)
    finally:
        os.close(alive)
