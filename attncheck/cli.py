"""The command line: ``attncheck PATHS...`` (``check`` is the default command),
``attncheck rules`` and ``attncheck rule CODE``.

Exit codes: 0 nothing at warning or above, 1 problems found (or a file that
could not be checked), 2 usage, configuration or internal error. Bad input
never shows a traceback; ``ATTNCHECK_DEBUG=1`` shows it for internal errors.
"""

from __future__ import annotations

import os
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import TextIO

import click

from attncheck.config import DEVICES, ConfigError
from attncheck.findings import Severity
from attncheck.sources import STDIN, FileError, Source, from_named_bytes
from attncheck.version import __version__

EXIT_CLEAN, EXIT_PROBLEMS, EXIT_ERROR = 0, 1, 2


class UsageProblem(click.ClickException):
    """A mistake in the command line or the configuration: exit 2, one line."""

    exit_code = EXIT_ERROR


class DefaultGroup(click.Group):
    """A group that treats anything that is not a subcommand as arguments to ``check``."""

    default_command = "check"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h", "--version")):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="attncheck")
def cli() -> None:
    """Find the mistakes in hand-written attention (PyTorch).

    attncheck PATHS... is short for attncheck check PATHS...
    """


@cli.command()
@click.argument("paths", nargs=-1)
@click.option("--static-only", is_flag=True,
              help="Only read the code; never import or run it (no torch needed).")
@click.option("--format", "output_format", type=click.Choice(["text", "json", "sarif", "github", "junit"]),
              help="Output format [default: text].")
@click.option("--output-format", "style", type=click.Choice(["full", "concise", "json", "sarif", "github", "junit"]),
              help="As ruff's: full (the text report), concise (one line per finding) or a machine format.")
@click.option("--show-checks", is_flag=True,
              help="List every dynamic check of every target (on a terminal, the full report does).")
@click.option("--statistics", is_flag=True, help="Show how many findings of each code instead of the findings.")
@click.option("--select", multiple=True, metavar="CODES",
              help="Only these codes or prefixes (comma-separated).")
@click.option("--ignore", multiple=True, metavar="CODES",
              help="Never these codes or prefixes (comma-separated).")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when problems are found.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              help="A pyproject.toml or attncheck.toml to use instead of the nearest one.")
@click.option("--timeout", type=float, metavar="SECONDS",
              help="Time limit of each dynamic target [default: 20].")
@click.option("--device", type=click.Choice(DEVICES), help="Where dynamic checks run [default: auto].")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Parallel workers [default: CPU count].")
@click.option("--isolated", is_flag=True,
              help="For CI and grading: ignore any configuration file found next to the checked files "
                   "(--config still applies), and keep a static error an error even when the dynamic check passes.")
@click.option("--unsafe-no-sandbox", is_flag=True,
              help="Run user code even where bubblewrap does not start: only rlimits and seccomp then "
                   "protect this machine (no file, network or process isolation).")
@click.option("--fix", is_flag=True, help="Write the available fixes into the files.")
@click.option("--diff", is_flag=True, help="Print the available fixes as a unified diff; change nothing.")
@click.option("--no-color", is_flag=True, help="No colour (also: NO_COLOR=1). Colour is used on a terminal.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report here.")
@click.option("--stdin-filename", metavar="NAME", help="The name to show for '-' (standard input).")
@click.option("--force-exclude", is_flag=True,
              help="Apply exclude to files named on the command line too (what a pre-commit hook wants).")
@click.option("--no-cache", is_flag=True,
              help="Lint every file again instead of reusing the static results of unchanged files "
                   "(kept in ATTNCHECK_CACHE_DIR, else $XDG_CACHE_HOME/attncheck or ~/.cache/attncheck).")
def check(paths: tuple[str, ...], static_only: bool, output_format: str | None, style: str | None,
          show_checks: bool, statistics: bool, select: tuple[str, ...],
          ignore: tuple[str, ...], exit_zero: bool, config_file: Path | None, timeout: float | None,
          device: str | None, isolated: bool, unsafe_no_sandbox: bool, jobs: int | None, fix: bool, diff: bool,
          no_color: bool, output: Path | None, stdin_filename: str | None, force_exclude: bool, no_cache: bool) -> None:
    """Check files, directories, notebooks, or '-' (standard input)."""
    from attncheck import pipeline
    from attncheck.progress import Progress
    from attncheck.projects import Projects, plan

    if not paths:
        raise UsageProblem("no paths given: try `attncheck model.py` or `attncheck --help`")
    if fix and diff:
        raise UsageProblem("--fix and --diff do not go together: --diff shows, --fix writes")
    missing = [p for p in paths if p != STDIN and not os.path.exists(p)]
    if missing:
        raise UsageProblem(f"no such file or directory: {missing[0]}")
    if config_file is not None and not config_file.is_file():
        raise UsageProblem(f"--config: no such file: {config_file}")
    report = _report_name(output_format, style, statistics)
    jobs = jobs or os.cpu_count() or 1
    try:
        projects = Projects(config_file, {"select": select, "ignore": ignore, "timeout": timeout, "device": device,
                                          "isolated": isolated, "unsafe_no_sandbox": unsafe_no_sandbox})
        groups = plan(list(paths), projects, force_exclude=force_exclude,
                      stdin=lambda: _stdin(stdin_filename or STDIN),
                      stdin_path=Path(stdin_filename) if stdin_filename else Path.cwd(), warn=_warn)
    except ConfigError as error:
        raise UsageProblem(str(error)) from error
    def run_all() -> tuple[pipeline.Outcome, list]:
        with Progress() as progress:
            return pipeline.combine([
                pipeline.run(group.items, group.settings, static_only=static_only, jobs=jobs,
                             use_cache=not no_cache, progress=progress.update)
                for group in groups
            ]) if groups else (pipeline.Outcome(), [])

    outcome, results = run_all()
    if diff or fix:
        from attncheck.fixes import apply_fixes

        fixed = apply_fixes(outcome, results, write=fix)
        if diff:
            sys.exit(EXIT_PROBLEMS if fixed else EXIT_CLEAN)
        if fixed:
            outcome, _ = run_all()  # what was written, checked again: fresh positions, the dynamic verdict
            remaining = sum(f.severity >= Severity.WARNING for f in outcome.findings)
            _warn(f"{fixed} fixed, {remaining} remaining")

    from attncheck.report import writer

    with _open(output) as stream:
        color = output is None and not no_color and not os.environ.get("NO_COLOR") and stream.isatty()
        options = {"show_checks": show_checks} if report == "text" else {}
        writer(report)(outcome, stream, color=color, **options)
    failed = pipeline.has_problems(outcome) and not exit_zero
    sys.exit(EXIT_PROBLEMS if failed else EXIT_CLEAN)


def _report_name(output_format: str | None, style: str | None, statistics: bool) -> str:
    """The report module to write with, from ``--format``, ``--output-format`` and ``--statistics``."""
    from_style = {"full": "text"}.get(style or "", style)
    if output_format and from_style and output_format != from_style:
        raise UsageProblem(f"--format {output_format} and --output-format {style} disagree: give one of them")
    name = output_format or from_style or "text"
    if statistics:
        if name not in ("text", "concise"):
            raise UsageProblem(f"--statistics is a human report: it does not go with the {name} format")
        return "statistics"
    return name


def _warn(message: str) -> None:
    click.echo(f"attncheck: {message}", err=True)


def _stdin(name: str) -> Source | FileError:
    data = sys.stdin.buffer.read()
    return from_named_bytes(data, name, name)


def _open(output: Path | None):
    if output is None:
        return nullcontext(sys.stdout)
    try:
        return output.open("w", encoding="utf-8")
    except OSError as error:
        raise UsageProblem(f"--output: cannot write {output}: {error.strerror or error}") from error


@cli.command()
def rules() -> None:
    """List every code: name, severity, and how it is found."""
    from rich.table import Table

    from attncheck.catalogue import CODES
    from attncheck.static.rules import all_rules

    static = {rule.code for rule in all_rules()}
    table = Table(title=None, box=None, pad_edge=False, padding=(0, 2, 0, 0))
    for column in ("code", "name", "severity", "found by", "what it is"):
        table.add_column(column)
    for info in CODES.values():
        found_by = "static + dynamic" if info.code in static else "dynamic"
        table.add_row(info.code, info.name, str(info.severity), found_by, info.summary)
    _console(sys.stdout).print(table)


@cli.command()
@click.argument("code")
def rule(code: str) -> None:
    """Explain one code (ATT201) or name (wrong-scale)."""
    from attncheck.catalogue import doc, lookup

    info = lookup(code)
    if info is None:
        raise UsageProblem(f"unknown code {code!r}: `attncheck rules` lists them all")
    text = doc(info.code) or f"# {info.code} {info.name}\n\n{info.summary}\n"
    stdout = sys.stdout
    if stdout.isatty() and not os.environ.get("NO_COLOR"):
        from rich.markdown import Markdown

        _console(stdout).print(Markdown(text))
    else:
        click.echo(text, nl=not text.endswith("\n"))


def _register_grade() -> None:
    from attncheck.grade.command import grade

    cli.add_command(grade)


_register_grade()


def _console(stream: TextIO):
    from rich.console import Console

    terminal = stream.isatty()
    return Console(file=stream, width=None if terminal else 200, no_color=not terminal or None,
                   highlight=False, soft_wrap=not terminal)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the command line and turn every failure into an exit code."""
    from attncheck.report.ascii_fallback import protect

    for stream in (sys.stdout, sys.stderr):
        protect(stream)
    try:
        code = cli.main(args=argv, prog_name="attncheck", standalone_mode=False)
    except click.ClickException as error:
        error.show()
        sys.exit(EXIT_ERROR)
    except click.Abort:
        click.echo("attncheck: interrupted", err=True)
        sys.exit(EXIT_ERROR)
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (``| head``): nothing left to say
        sys.exit(EXIT_CLEAN)
    except KeyboardInterrupt:
        click.echo("attncheck: interrupted", err=True)
        sys.exit(130)
    except Exception as error:
        if os.environ.get("ATTNCHECK_DEBUG") == "1":
            raise
        click.echo(f"attncheck: internal error: {type(error).__name__}: {error} "
                   "(please report this; ATTNCHECK_DEBUG=1 shows the traceback)", err=True)
        sys.exit(EXIT_ERROR)
    sys.exit(code if isinstance(code, int) else EXIT_CLEAN)
