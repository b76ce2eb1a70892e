"""The Python API: ``attncheck.check(paths, ...)`` and ``attncheck.assert_attention(cls, ...)``.

``check`` is the command line's ``check`` without the printing: the same discovery
(each file under its nearest configuration), the same pipeline, and a Report holding
what the JSON report holds (``report.to_json()`` is that document, schema and all).
``assert_attention`` is for a model repository's own tests: it checks one class or
function that the test has imported, and raises AssertionError naming the findings.
Neither prints; warnings are kept on the report.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from attncheck.config import ConfigError, Settings
from attncheck.findings import Finding, TargetResult
from attncheck.pipeline import Outcome
from attncheck.sources import FileError


@dataclass
class Report:
    """The result of a check: findings, targets, files that could not be checked, and warnings."""

    outcome: Outcome
    warnings: list[str] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        return self.outcome.findings

    @property
    def targets(self) -> list[TargetResult]:
        return self.outcome.targets

    @property
    def errors(self) -> list[FileError]:
        return self.outcome.errors

    @property
    def passed(self) -> bool:
        """What exit code 0 means: nothing at warning or above, every file checked, no target in error."""
        from attncheck.pipeline import has_problems

        return not has_problems(self.outcome)

    def to_json(self) -> dict[str, Any]:
        """The JSON report's document (``attncheck/report/schema.json``)."""
        from attncheck.report.json_format import document

        return document(self.outcome)

    def describe(self) -> str:
        """The concise report: one line per finding, file error and failing target, then the summary."""
        import io

        from attncheck.report import writer

        stream = io.StringIO()
        writer("concise")(self.outcome, stream, color=False)
        return stream.getvalue()


def check(paths: str | Path | Iterable[str | Path], *, static_only: bool = False, select: Iterable[str] = (),
          ignore: Iterable[str] = (), config: str | Path | None = None, timeout: float | None = None,
          device: str | None = None, jobs: int | None = None, force_exclude: bool = False,
          use_cache: bool = True, target: str | None = None) -> Report:
    """Check files, folders and notebooks as ``attncheck PATHS`` does.

    Options are the command line's (``select=["wrong-scale"]`` is ``--select wrong-scale``);
    ``target`` keeps only the classes and functions of that name, and the findings in them.
    Raises ValueError for a path that does not exist or settings that cannot be used.
    """
    from attncheck.projects import Projects, plan

    named = [str(paths)] if isinstance(paths, (str, Path)) else [str(p) for p in paths]
    missing = [p for p in named if not Path(p).exists()]
    if missing:
        raise ValueError(f"no such file or directory: {missing[0]}")
    warnings: list[str] = []
    try:
        projects = Projects(Path(config) if config is not None else None,
                            {"select": tuple(select), "ignore": tuple(ignore), "timeout": timeout, "device": device})
        groups = plan(named, projects, force_exclude=force_exclude, stdin=_no_stdin, stdin_path=Path.cwd(),
                      warn=warnings.append)
    except ConfigError as error:
        raise ValueError(str(error)) from error
    outcome = _run([(g.settings, g.items) for g in groups], static_only, jobs, use_cache, warnings, target)
    return Report(outcome, warnings)


def _no_stdin() -> FileError:
    raise ValueError("'-' (standard input) is for the command line; pass the text's file instead")


def _run(groups: list[tuple[Settings, list]], static_only: bool, jobs: int | None, use_cache: bool,
         warnings: list[str], only: str | None = None) -> Outcome:
    import os

    from attncheck import pipeline

    parts = [pipeline.run(items, settings, static_only=static_only, jobs=jobs or os.cpu_count() or 1,
                          warn=warnings.append, use_cache=use_cache, only=only)
             for settings, items in groups]
    return pipeline.combine(parts)[0] if parts else Outcome()


def assert_attention(module_or_class: type | ModuleType | Any, *, timeout: float | None = None,
                     device: str | None = None, **declaration: Any) -> Report:
    """Check one attention class or function (or every target of a module) dynamically, as built and
    called per ``declaration`` (the keys of ``[tool.attncheck.targets.NAME]``: ``init``, ``forward``,
    ``mask``, ``causal``, ``d_model``, ``heads``); raise AssertionError listing what is wrong.

    The object must come from a file (a test module or the model's own): the dynamic check
    imports that file in an isolated child. Returns the Report when everything passes.
    """
    from attncheck.declarations import check_declaration
    from attncheck.discovery import Candidate

    name = None if inspect.ismodule(module_or_class) else getattr(module_or_class, "__name__", None)
    file = _defined_in(module_or_class)
    if file is None or not Path(file).is_file():
        raise TypeError(f"assert_attention needs a class, function or module defined in a file, "
                        f"got {module_or_class!r}")
    if declaration and name is None:
        raise TypeError("a declaration describes one class or function: pass it, not a module")
    try:
        check_declaration(name or "", declaration, "assert_attention")
    except ConfigError as error:
        raise ValueError(str(error)) from error
    settings = Settings(root=Path(file).parent, targets={name: declaration} if declaration else {})
    if timeout is not None or device is not None:
        from attncheck.config import with_overrides

        settings = with_overrides(settings, select=(), ignore=(), timeout=timeout, device=device)
    warnings: list[str] = []
    path = Path(file)
    outcome = _run([(settings, [Candidate(path, str(path), explicit=True)])], False, 1, True, warnings, only=name)
    report = Report(outcome, warnings)
    if name is not None and not outcome.targets:
        raise AssertionError(f"attncheck found no attention in {name} ({file}): nothing was checked")
    if not report.passed or any(t.status == "skipped" for t in outcome.targets):
        raise AssertionError(f"attncheck: {name or file} is not right:\n{_problems(report)}")
    return report


def _defined_in(thing: Any) -> str | None:
    """The file that defines a module, class or function; for a class of a module not in
    ``sys.modules`` (loaded from a path by hand), the file of its methods' code."""
    try:
        return inspect.getsourcefile(thing)
    except TypeError:
        pass
    if inspect.isclass(thing):
        codes = [member.__code__ for member in vars(thing).values() if inspect.isfunction(member)]
        return codes[0].co_filename if codes else None
    return None


def _problems(report: Report) -> str:
    """The findings at warning or above and the targets that did not pass, with their reasons."""
    lines = report.describe().splitlines()[:-1]  # the summary line says less than the lines above it
    for result in report.targets:
        if result.status == "skipped":
            lines.append(f"{result.target.path}:{result.target.line}: {result.target.name}: skipped: {result.reason}")
        for check in result.checks:
            if check.status in ("failed", "error"):
                lines.append(f"  {result.target.name}: {check.name}: {check.status}: {check.detail}")
    return "\n".join(lines)

