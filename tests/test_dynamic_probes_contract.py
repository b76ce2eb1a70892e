"""The probe contract: the registry finds every probe module, each declares catalogue codes, and
the dynamic codes module names each ATT90x code as the catalogue does."""

from __future__ import annotations

from attncheck.catalogue import CODES
from attncheck.dynamic import codes
from attncheck.dynamic.probes.registry import all_probes, planning_order


def test_the_registry_finds_the_probe_modules_in_their_order():
    names = [probe.name for probe in all_probes()]
    assert names == [
        "reference", "masks", "leaks", "weights-sum", "gradients", "dropout", "structure",
        "low-precision", "gqa-grouping", "kv-cache", "rope-relative-shift", "finite-output",
    ]


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
