"""Settings from ``[tool.attncheck]`` (or ``attncheck.toml``) and the command line, merged once.

The file is found by walking up from the first path checked (or the current
folder), or named with ``--config``. Every key is validated here, so a typo in
a code or a key is a clear error before any file is read, never a silent no-op.
The command line overrides the file, key by key.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from attncheck.catalogue import CODES, lookup
from attncheck.discovery import gitignore_spec
from attncheck.errors import ConfigError

if TYPE_CHECKING:
    import pathspec


DEVICES = ("cpu", "cuda", "auto")
MAX_TIMEOUT_S = 300.0  # per target: a configuration cannot hold a run (or a grader) for longer

KEYS = ("select", "ignore", "per-file-ignores", "exclude", "timeout", "device", "compile", "targets")
COMPILE_TIMEOUT_S = 180.0
"""The least time a target gets with ``compile = true``: compiling flex_attention for the CPU takes
15-35 s a shape (bench/flex_compile.py), which the default 20 s would cut short."""


@dataclass(frozen=True)
class DynamicOptions:
    """What the dynamic stage needs to know; ``targets`` holds per-target declarations by name."""

    timeout: float = 20.0
    device: str = "auto"
    jobs: int = 1
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    unsafe_no_sandbox: bool = False  # run user code even where bubblewrap does not start
    compile: bool = False  # also run torch.compile'd callables compiled, once, in float32


@dataclass(frozen=True)
class Settings:
    """The merged settings of one run. ``root`` is the folder globs are relative to."""

    root: Path = Path()
    config_file: Path | None = None
    select: tuple[str, ...] = ("ALL",)
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = ()
    timeout: float = 20.0
    device: str = "auto"
    compile: bool = False  # ``compile = true``: check torch.compile'd code compiled too (slow)
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    unsafe_no_sandbox: bool = False  # only from the command line, never from a file
    isolated: bool = False  # --isolated (CI, grading): no file's configuration; static errors stay errors

    def enabled(self, code: str) -> bool:
        """Whether ``code`` is on: the most specific matching selector wins, ``ignore`` on a tie."""
        selected = _best_match(code, self.select)
        ignored = _best_match(code, self.ignore)
        return selected > ignored

    def ignored_for(self, path: str) -> tuple[str, ...]:
        """Codes that ``per-file-ignores`` turns off for ``path``."""
        codes: list[str] = []
        relative = _relative(path, self.root)
        for pattern, pattern_codes in self.per_file_ignores:
            spec = _glob(pattern)
            if spec.match_file(relative) or spec.match_file(path):
                codes.extend(pattern_codes)
        return tuple(codes)

    def dynamic_options(self, jobs: int) -> DynamicOptions:
        return DynamicOptions(
            timeout=max(self.timeout, COMPILE_TIMEOUT_S) if self.compile else self.timeout,
            device=self.device,
            jobs=jobs,
            targets=self.targets,
            unsafe_no_sandbox=self.unsafe_no_sandbox,
            compile=self.compile,
        )


@lru_cache(maxsize=256)
def _glob(pattern: str) -> pathspec.GitIgnoreSpec:
    return gitignore_spec([pattern])


def _best_match(code: str, selectors: Iterable[str]) -> int:
    """Length of the longest selector naming ``code`` (``ALL`` counts as 0), or -1."""
    best = -1
    for selector in selectors:
        if selector == "ALL":
            best = max(best, 0)
        elif code.startswith(selector):
            best = max(best, len(selector))
    return best


def _relative(path: str, root: Path) -> str:
    try:
        return Path(path).resolve().relative_to(root.resolve()).as_posix()
    except (ValueError, OSError):
        return PurePath(path).as_posix()


def parse_codes(values: Iterable[str], where: str) -> tuple[str, ...]:
    """Codes, prefixes or rule names (``wrong-scale``) from comma-separated strings, each checked
    against the catalogue; names come back as their codes."""
    codes: list[str] = []
    for value in values:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected codes as strings, got {value!r}")
        for part in value.split(","):
            code = part.strip().upper()
            if not code:
                continue
            named = lookup(part)
            if named is not None:
                code = named.code
            elif code != "ALL" and not any(known.startswith(code) for known in CODES):
                raise ConfigError(f"{where}: unknown code or prefix {part.strip()!r} (see `attncheck rules`)")
            codes.append(code)
    return tuple(codes)


def parse_selection(values: Iterable[str], where: str) -> tuple[str, ...]:
    """``select``'s codes: an empty selection would turn every check off, which is never meant."""
    codes = parse_codes(values, where)
    if not codes:
        raise ConfigError(f"{where}: no code given, which would turn every check off "
                          "(name codes, prefixes or rule names, or ALL)")
    return codes


def config_in(folder: Path) -> Path | None:
    """The configuration ``folder`` holds itself: its ``attncheck.toml``, else its
    ``pyproject.toml`` when that has a ``[tool.attncheck]`` table."""
    own = folder / "attncheck.toml"
    if own.is_file():
        return own
    pyproject = folder / "pyproject.toml"
    if pyproject.is_file() and _declares_attncheck(pyproject, pyproject.stat().st_mtime_ns):
        return pyproject
    return None


@cache
def _declares_attncheck(pyproject: Path, modified: int) -> bool:
    """Whether a ``pyproject.toml`` has a ``[tool.attncheck]`` table, read once per version of
    the file: every folder below a project's root asks about the same one, and parsing TOML
    is slow (535 parses for the transformers tree, 4 % of a static run)."""
    return "attncheck" in _read_toml(pyproject).get("tool", {})


def _read_toml(path: Path) -> dict[str, Any]:
    """A TOML file's table. The parser is imported here: a run with no configuration never needs it."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror or error}") from error
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from error


def load(path: Path | None) -> Settings:
    """Settings from a configuration file, or the defaults when there is none."""
    if path is None:
        return Settings(root=Path.cwd())
    data = _read_toml(path)
    table = data.get("tool", {}).get("attncheck")
    if table is None:
        table = {} if path.name == "pyproject.toml" else data
    if not isinstance(table, Mapping):
        raise ConfigError(f"{path}: [tool.attncheck] must be a table")
    return _from_table(table, path)


def _from_table(table: Mapping[str, Any], path: Path) -> Settings:
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r} (known keys: {', '.join(KEYS)})")
    settings = Settings(root=path.parent.resolve(), config_file=path)
    changes: dict[str, Any] = {}
    if "select" in table:
        changes["select"] = parse_selection(_strings(table["select"], path, "select"), f"{path}: select")
    if "ignore" in table:
        changes["ignore"] = parse_codes(_strings(table["ignore"], path, "ignore"), f"{path}: ignore")
    if "exclude" in table:
        changes["exclude"] = tuple(_strings(table["exclude"], path, "exclude"))
    if "per-file-ignores" in table:
        changes["per_file_ignores"] = _per_file_ignores(table["per-file-ignores"], path)
    if "timeout" in table:
        changes["timeout"] = check_timeout(table["timeout"], f"{path}: timeout")
    if "device" in table:
        changes["device"] = check_device(table["device"], f"{path}: device")
    if "compile" in table:
        if not isinstance(table["compile"], bool):
            raise ConfigError(f"{path}: compile must be true or false, got {table['compile']!r}")
        changes["compile"] = table["compile"]
    if "targets" in table:
        changes["targets"] = _targets(table["targets"], path)
    return replace(settings, **changes)


def _strings(value: Any, path: Path, key: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    raise ConfigError(f"{path}: {key} must be a list of strings")


def _per_file_ignores(value: Any, path: Path) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}: per-file-ignores must be a table of glob = [codes]")
    return tuple(
        (glob, parse_codes(_strings(codes, path, f"per-file-ignores.{glob}"), f"{path}: per-file-ignores"))
        for glob, codes in value.items()
    )


def _targets(value: Any, path: Path) -> dict[str, dict[str, Any]]:
    if not isinstance(value, Mapping) or not all(isinstance(v, Mapping) for v in value.values()):
        raise ConfigError(f"{path}: targets must be a table of tables ([tool.attncheck.targets.NAME])")
    from attncheck.declarations import validate

    validate(value, path)
    return {name: dict(declaration) for name, declaration in value.items()}


def check_timeout(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"{where}: must be a positive number of seconds, got {value!r}")
    if value > MAX_TIMEOUT_S:
        raise ConfigError(f"{where}: must be at most {MAX_TIMEOUT_S:g} seconds, got {value!r}")
    return float(value)


def check_device(value: Any, where: str) -> str:
    if value not in DEVICES:
        raise ConfigError(f"{where}: must be one of {', '.join(DEVICES)}, got {value!r}")
    return str(value)


def with_overrides(settings: Settings, *, select: Sequence[str], ignore: Sequence[str],
                   timeout: float | None, device: str | None, isolated: bool = False,
                   unsafe_no_sandbox: bool = False) -> Settings:
    """The command line's values replace the file's, key by key; absent options change nothing.
    ``isolated`` and ``unsafe_no_sandbox`` exist only here: no file can set them."""
    changes: dict[str, Any] = {"isolated": isolated, "unsafe_no_sandbox": unsafe_no_sandbox}
    if select:
        changes["select"] = parse_selection(select, "--select")
    if ignore:
        changes["ignore"] = parse_codes(ignore, "--ignore")
    if timeout is not None:
        changes["timeout"] = check_timeout(timeout, "--timeout")
    if device is not None:
        changes["device"] = check_device(device, "--device")
    return replace(settings, **changes)
