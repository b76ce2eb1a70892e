"""Which settings each file is checked under, and so which files are checked at all.

Like ruff, each file gets the configuration nearest to it (``attncheck.toml``, or a
``pyproject.toml`` with ``[tool.attncheck]``), so the findings of a file never depend on
which other paths were named or in what order; ``--config`` names one for every file.
The command line's options apply on top of each. Files are grouped by configuration,
in the order they were first met, and each group is one pipeline run.

``exclude`` applies to the files a directory walk finds; with ``force_exclude`` (what a
pre-commit hook wants, since it names every staged file) it applies to named files too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from itertools import chain
from pathlib import Path
from typing import Any

from attncheck.config import Settings, config_in, load, with_overrides
from attncheck.discovery import Candidate, Discovery, Excluder, real_path
from attncheck.sources import FileError, Source


@dataclass
class Group:
    """The files one configuration applies to."""

    settings: Settings
    items: list[Candidate | Source | FileError] = field(default_factory=list)


class Projects:
    """The settings of each folder's nearest configuration (or the one ``--config`` named), each loaded once.

    ``overrides`` are the keyword arguments of ``config.with_overrides`` (the command line's options).
    Raises ConfigError for a configuration that cannot be used, when it is first needed.
    """

    def __init__(self, config_file: Path | None, overrides: Mapping[str, Any]) -> None:
        self.config_file = config_file
        self.overrides = dict(overrides)
        with_overrides(Settings(), **self.overrides)  # a bad option is an error before any file is read
        self._loaded: dict[Path | None, Settings] = {}
        self._real_folders: dict[str, str] = {}  # ``discovery.real_path``'s
        self._nearest: dict[Path, Path | None] = {}  # each real folder's nearest configuration

    def settings_for(self, path: Path) -> Settings:
        """The settings a file (or a folder's walk) is checked under."""
        real = Path(real_path(path, self._real_folders))
        folder = real if real.is_dir() else real.parent
        config = self.config_file
        if config is None and not self.overrides.get("isolated"):  # --isolated: no file beside the checked ones
            config = self._nearest_config(folder)
        if config not in self._loaded:
            self._loaded[config] = with_overrides(load(config), **self.overrides)
        return self._loaded[config]

    def _nearest_config(self, folder: Path) -> Path | None:
        """The nearest ``attncheck.toml`` (or ``pyproject.toml`` with ``[tool.attncheck]``) from a
        real folder up: its own configuration (``config.config_in``), else its parent's answer.
        Each folder is asked once: the files of a folder, and the folders of a tree (a model per
        folder), share their parents, which a search from each would ask again."""
        climbed: list[Path] = []
        found = None
        for here in chain((folder,), folder.parents):  # lazily: most stop at the first
            if here in self._nearest:
                found = self._nearest[here]
                break
            climbed.append(here)
            found = config_in(here)
            if found is not None:
                break
        self._nearest.update(dict.fromkeys(climbed, found))
        return found


def excluder(settings: Settings) -> Excluder:
    return _excluder(settings.exclude, settings.root)


@cache
def _excluder(patterns: tuple[str, ...], root: Path) -> Excluder:
    return Excluder(patterns, root)


def plan(paths: list[str], projects: Projects, *, force_exclude: bool, stdin: Callable[[], Source | FileError],
         stdin_path: Path, warn: Callable[[str], None]) -> list[Group]:
    """The files to check, grouped by the settings they are checked under.

    ``stdin`` reads standard input (for ``-``), which is checked under the settings of
    ``stdin_path`` (its ``--stdin-filename``, or the current folder). A path that yields
    no file at all is worth a warning: a typo or an exclude that is wider than meant.
    """
    groups: dict[int, Group] = {}

    def add(settings: Settings, item: Candidate | Source | FileError) -> None:
        groups.setdefault(id(settings), Group(settings)).items.append(item)

    discovery = Discovery()
    for given in paths:
        if given == "-":
            add(projects.settings_for(stdin_path), stdin())
            continue
        found = 0
        walk_settings = projects.settings_for(Path(given))
        for candidate in discovery.files(given, excluder(walk_settings)):
            settings = walk_settings if candidate.explicit else projects.settings_for(candidate.path)
            # The walk applied its own exclude; a file of a nested project also gets its own project's.
            asked = force_exclude if candidate.explicit else settings is not walk_settings
            if asked and excluder(settings)(candidate.path, is_dir=False):
                found += candidate.explicit  # a named file excluded on purpose is no surprise
                continue
            found += 1
            add(settings, candidate)
        if not found:
            warn(f"warning: {given}: no Python file or notebook to check there (none, or all ignored or excluded)")
    return list(groups.values())
