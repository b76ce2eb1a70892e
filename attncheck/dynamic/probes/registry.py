"""Every probe: each module of this package that defines ``PROBE``, in the probes' ``order``.

Found by listing the package, so that adding a probe touches no list.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from attncheck.dynamic import probes
from attncheck.dynamic.probes.base import Probe


@cache
def all_probes() -> tuple[Probe, ...]:
    """The probes, judged (and, unless they say otherwise, planned) in this order."""
    found: list[Probe] = []
    for module in pkgutil.iter_modules(probes.__path__):
        loaded = importlib.import_module(f"{probes.__name__}.{module.name}")
        if hasattr(loaded, "PROBE"):
            found.append(loaded.PROBE)
    return tuple(sorted(found, key=lambda probe: probe.order))


@cache
def planning_order() -> tuple[Probe, ...]:
    """The probes in the order they plan: they draw from one generator, so this order fixes the inputs."""
    return tuple(sorted(all_probes(), key=lambda probe: probe.order if probe.plan_order is None else probe.plan_order))
