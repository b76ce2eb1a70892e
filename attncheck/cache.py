"""Static results per file, keyed on its content, so an unchanged file is not parsed again.

An entry holds what linting one file's bytes gave: findings, targets, or the
one-line reason it could not be linted, without the path (the same bytes under
another name give the same answer). Entries live under a namespace that names
everything else the answer depends on: attncheck's version and the fingerprint
of its static code, libcst's version, the Python version and the enabled
codes; changing any of them starts a new namespace.

The cache is an optimisation and nothing more: an unreadable, corrupted or
read-only cache is silently ignored. It lives in ``ATTNCHECK_CACHE_DIR``, else
``$XDG_CACHE_HOME/attncheck``, else ``~/.cache/attncheck``: never in the
user's project. This module imports no libcst, so a warm run never loads it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attncheck.findings import Edit, Finding, Parameter, Severity, Span, Target
from attncheck.sources import Source
from attncheck.version import __version__

FORMAT = 2  # bump when the layout of an entry changes
_PACKAGE = Path(__file__).resolve().parent
# The code a static result never depends on: every other module of the package (the rules in their
# folders by question, the analyses, the catalogue, the configuration) joins the namespace by its
# size and modification time, so an edited attncheck (an editable install) never reads a stale entry.
_NOT_STATIC = ("dynamic", "grade")


def default_dir() -> Path:
    """Where the cache lives when nothing says otherwise."""
    explicit = os.environ.get("ATTNCHECK_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "attncheck"


def _code_fingerprint() -> str:
    """Size and modification time of every module of the static pass (``os.scandir``: a warm run pays
    about a millisecond for it)."""
    parts = []
    folders = [str(_PACKAGE)]
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in _NOT_STATIC and entry.name != "__pycache__":
                        folders.append(entry.path)
                elif entry.name.endswith(".py"):
                    info = entry.stat()
                    parts.append(f"{entry.path}:{info.st_size}:{info.st_mtime_ns}")
    return "|".join(sorted(parts))


def _libcst_version() -> str:
    """libcst's version file, found without importing libcst (a warm run never loads it)."""
    from importlib.util import find_spec

    spec = find_spec("libcst")
    if spec is None or spec.origin is None:
        return "none"
    try:
        return (Path(spec.origin).parent / "_version.py").read_text(encoding="utf-8")
    except OSError:
        return spec.origin


def namespace(codes: Sequence[str]) -> str:
    """The name of the entries valid for this attncheck, libcst, Python and rule selection."""
    identity = "\n".join((
        f"format {FORMAT}", f"attncheck {__version__}", f"libcst {_libcst_version()}",
        f"python {sys.version_info[:2]}", "codes " + ",".join(codes), _code_fingerprint(),
    ))
    return hashlib.sha256(identity.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Entry:
    """A file's static result without its path."""

    findings: list[Finding]
    targets: list[Target]
    error: str | None


class Cache:
    """Entries of one namespace in one directory."""

    def __init__(self, root: Path, codes: Sequence[str]) -> None:
        self.directory = root / f"static-{namespace(codes)}"
        self._made: set[Path] = set()  # the folders this run has made sure of

    @staticmethod
    def key(data: bytes, kind: str) -> str:
        """The content key of a file's bytes read as ``kind`` (``sources.read_as``: a notebook, a
        Markdown file and a script never share one)."""
        return hashlib.sha256(kind.encode() + b"\0" + data).hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key[2:]}.json"

    def get(self, key: str, source: Source) -> Entry | None:
        """The entry for ``key``, with ``source``'s path put back; None when absent or unusable."""
        try:
            document = json.loads(self._path(key).read_bytes())
            return Entry(
                [_finding(item, source.path) for item in document["findings"]],
                [_target(item, source.path) for item in document["targets"]],
                document["error"],
            )
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
            return None

    def put(self, key: str, findings: Sequence[Finding], targets: Sequence[Target], error: str | None) -> None:
        """Store an entry; a cache that cannot be written is left alone."""
        document = {
            "findings": [_finding_row(f) for f in findings],
            "targets": [_target_row(t) for t in targets],
            "error": error,
        }
        path = self._path(key)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            if path.parent not in self._made:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._made.add(path.parent)
            temporary.write_text(json.dumps(document, separators=(",", ":")), encoding="utf-8")
            os.replace(temporary, path)
        except OSError:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)


# -- compact rows -----------------------------------------------------------------
# Positional lists rather than dicts: half the bytes, and a changed layout is a
# new FORMAT, not a silent misreading.


def _finding_row(f: Finding) -> list[Any]:
    span = f.span
    return [f.code, int(f.severity), f.message, span.line, span.column, span.end_line, span.end_column,
            span.cell, f.source, f.target, f.hint, list(f.evidence), [[e.start, e.end, e.replacement] for e in f.fix],
            f.by_design]


def _finding(row: list[Any], path: str) -> Finding:
    code, severity, message, line, column, end_line, end_column, cell, source, target, hint, evidence, fix, design = row
    return Finding(
        code=code, severity=Severity(severity), message=message, path=path,
        span=Span(line, column, end_line, end_column, cell), source=source, target=target, hint=hint,
        evidence=list(evidence), fix=tuple(Edit(start, end, text) for start, end, text in fix), by_design=design,
    )


def _parameter_row(p: Parameter) -> list[Any]:
    return [p.name, p.default, p.annotation, p.kind]


def _target_row(t: Target) -> list[Any]:
    return [t.name, t.line, list(t.kinds), t.is_class, [_parameter_row(p) for p in t.init_params],
            [_parameter_row(p) for p in t.forward_params], t.mask_param, t.docstring, t.config_class]


def _target(row: list[Any], path: str) -> Target:
    name, line, kinds, is_class, init_params, forward_params, mask_param, docstring, config_class = row
    return Target(
        path=path, name=name, line=line, kinds=tuple(kinds), is_class=is_class,
        init_params=tuple(Parameter(*p) for p in init_params),
        forward_params=tuple(Parameter(*p) for p in forward_params),
        mask_param=mask_param, docstring=docstring, config_class=config_class,
    )
