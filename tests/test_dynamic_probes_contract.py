"""The probe contract: the registry finds every probe module, each declares catalogue codes, and
the dynamic codes module names each ATT90x code as the catalogue does."""

from __future__ import annotations

import re
from pathlib import Path

from attncheck.catalogue import CODES
from attncheck.dynamic import codes, probes
from attncheck.dynamic.probes.registry import all_probes, planning_order

TODAY = [
    "reference", "masks", "leaks", "weights-sum", "gradients", "dropout", "structure",
    "low-precision", "gqa-grouping", "rope-declared", "kv-cache", "rope-relative-shift",
    "window-length", "softcap-engaged", "dynamic-rope", "finite-output",
]


def test_the_registry_finds_the_probe_modules_in_their_order():
    """Every module that defines PROBE, each once, ascending; today's probes in this order (a new
    probe slots in by its own order without an edit here)."""
    defining = [p for p in Path(probes.__path__[0]).glob("*.py") if re.search(r"^PROBE = ", p.read_text(), re.M)]
    found = all_probes()
    assert len(found) == len(defining) == len({probe.name for probe in found})
    orders = [probe.order for probe in found]
    assert orders == sorted(set(orders))
    names = [probe.name for probe in found]
    assert [name for name in names if name in TODAY] == TODAY


def test_the_probes_plan_in_their_planning_order():
    """They draw from one generator: the leak inputs come before the masks', the masks before the
    low-precision runs that reuse them."""
    names = [probe.name for probe in planning_order()]
    assert names.index("leaks") < names.index("masks") < names.index("dropout") < names.index("low-precision")
    assert sorted(names) == sorted(probe.name for probe in all_probes())


def test_every_declared_code_is_in_the_catalogue():
    declared = {code for probe in all_probes() for code in probe.codes}
    assert declared and declared <= set(CODES)


def test_the_codes_module_names_each_dynamic_code_as_the_catalogue_does():
    named = {value: name for name, value in vars(codes).items() if name.isupper()}
    assert sorted(named) == [f"ATT90{i}" for i in range(1, 10)]
    assert all(CODES[code].name == name.lower().replace("_", "-") for code, name in named.items())
