"""Python's cycle collector, paused in lint workers.

Linting a file builds and drops about a million objects: two syntax trees and
the analyses over them. CPython's collector runs every 700 allocations and
scans everything still alive each time, and while a tree is being built that is
all of it: about a sixth of a lint's CPU, for nothing, since reference counting
frees each file's trees when it is done (the analyses keep no reference cycles;
``tests/test_collector.py`` checks). So a lint worker pauses the collector, and
collects only when the objects left over since the last collection pass a
bound, which keeps memory bounded whatever a file leaves behind. What outlives
such a collection is alive on purpose (the functions ``fast_tree`` keeps for the
files that repeat them) and is frozen too, so that the next collection scans
only what came since, not everything again.
"""

from __future__ import annotations

import gc

# Objects allocated and not freed since the last collection (``gc.get_count()[0]``), above which
# the next file boundary collects: tens of megabytes at most. A lint leaves a few hundred.
LEFT_OVER_LIMIT = 200_000


def start_worker() -> None:
    """Initializer of a lint worker process: pause the collector for the worker's life, and
    make what the worker has inherited permanent (``gc.freeze``), so no collection scans it."""
    gc.freeze()
    gc.disable()


def after_file() -> None:
    """At a file boundary in a worker, collect when enough objects outlived their files, then
    freeze the survivors."""
    if not gc.isenabled() and gc.get_count()[0] > LEFT_OVER_LIMIT:
        gc.collect()
        gc.freeze()
