"""``pytest --attncheck``: each attention target of the collected paths becomes a test item.

An item fails with the target's findings as its text (static and dynamic, merged as the
command line merges them), so a model repository gates on attncheck in the test run it
already has. Each file under the collected paths is checked under its nearest
configuration; ``--attncheck-static`` reads the code only (no torch).

Without ``--attncheck`` the plugin adds two options and nothing else: no file is looked
at and nothing of attncheck beyond this module is imported, so a test run is as fast and
collects the same items as without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SUFFIXES = (".py", ".ipynb")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attncheck", "attncheck: mistakes in hand-written attention")
    group.addoption("--attncheck", action="store_true", default=False,
                    help="Check each attention class and function of the collected paths as a test item.")
    group.addoption("--attncheck-static", action="store_true", default=False,
                    help="With --attncheck: read the code only (no torch, no dynamic checks).")


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if not parent.config.getoption("attncheck") or file_path.suffix not in SUFFIXES:
        return None
    return AttncheckFile.from_parent(parent, path=file_path)


class AttncheckFile(pytest.File):
    """A file's attention targets, found by the static pass."""

    def collect(self) -> Iterator[pytest.Item]:
        from attncheck.api import check

        report = check([self.path], static_only=True)
        for error in report.errors:
            if error.level == "error":
                yield AttncheckItem.from_parent(self, name="[file]", target=None, message=error.message)
        for result in report.targets:
            yield AttncheckItem.from_parent(self, name=result.target.name, target=result.target.name)


class AttncheckFindingsError(Exception):
    """The findings of one target, as its failure text."""


class AttncheckItem(pytest.Item):
    """One target: checked when run (statically, or statically and dynamically)."""

    def __init__(self, *, target: str | None, message: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.message = message

    def runtest(self) -> None:
        if self.target is None:
            raise AttncheckFindingsError(f"{self.path}: {self.message}")
        from attncheck.api import check

        report = check([self.path], static_only=self.config.getoption("attncheck_static"), target=self.target)
        if not report.passed:
            raise AttncheckFindingsError(report.describe())

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, AttncheckFindingsError):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"attncheck: {self.target or self.path.name}"
