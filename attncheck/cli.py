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
from dataclasses import replace
from pathlib import Path
from typing import TextIO

import click

from attncheck import __version__
from attncheck.config import DEVICES, ConfigError, Settings, find_config, load, with_overrides
from attncheck.sources import STDIN, FileError, Source, from_bytes

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
              default="text", show_default=True, help="Output format.")
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
@click.option("--no-cache", is_flag=True,
              help="Lint every file again instead of reusing the static results of unchanged files "
                   "(kept in ATTNCHECK_CACHE_DIR, else $XDG_CACHE_HOME/attncheck or ~/.cache/attncheck).")
def check(paths: tuple[str, ...], static_only: bool, output_format: str, select: tuple[str, ...],
          ignore: tuple[str, ...], exit_zero: bool, config_file: Path | None, timeout: float | None,
          device: str | None, isolated: bool, unsafe_no_sandbox: bool, jobs: int | None, fix: bool, diff: bool,
          no_color: bool, output: Path | None, stdin_filename: str | None, no_cache: bool) -> None:
    """Check files, directories, notebooks, or '-' (standard input)."""
    from attncheck import pipeline
    from attncheck.discovery import Excluder, discover

    if not paths:
        raise UsageProblem("no paths given: try `attncheck model.py` or `attncheck --help`")
    if fix and diff:
        raise UsageProblem("--fix and --diff do not go together: --diff shows, --fix writes")
    missing = [p for p in paths if p != STDIN and not os.path.exists(p)]
    if missing:
        raise UsageProblem(f"no such file or directory: {missing[0]}")
    settings = _settings(paths, config_file, select, ignore, timeout, device, isolated)
    settings = replace(settings, unsafe_no_sandbox=unsafe_no_sandbox, isolated=isolated)
    jobs = jobs or os.cpu_count() or 1
    excluder = Excluder(settings.exclude, settings.root)
    items: list[pipeline.Item] = []
    for path in paths:
        if path == STDIN:
            items.append(_stdin(stdin_filename or STDIN))
        else:
            items.extend(discover([path], excluder))
    outcome, results = pipeline.run(items, settings, static_only=static_only, jobs=jobs, use_cache=not no_cache)

    if diff or fix:
        from attncheck.fixes import apply_fixes

        changed = apply_fixes(outcome, results, write=fix)
        if diff:
            sys.exit(EXIT_PROBLEMS if changed else EXIT_CLEAN)

    from attncheck.report import writer

    with _open(output) as stream:
        color = output is None and not no_color and not os.environ.get("NO_COLOR") and stream.isatty()
        writer(output_format)(outcome, stream, color=color)
    failed = pipeline.has_problems(outcome) and not exit_zero
    sys.exit(EXIT_PROBLEMS if failed else EXIT_CLEAN)


def _settings(paths: tuple[str, ...], config_file: Path | None, select: tuple[str, ...],
              ignore: tuple[str, ...], timeout: float | None, device: str | None, isolated: bool) -> Settings:
    try:
        if config_file is not None and not config_file.is_file():
            raise ConfigError(f"--config: no such file: {config_file}")
        first = next((Path(p) for p in paths if p != STDIN), Path.cwd())
        found = None if isolated else find_config(first)
        settings = load(config_file or found)
        return with_overrides(settings, select=select, ignore=ignore, timeout=timeout, device=device)
    except ConfigError as error:
        raise UsageProblem(str(error)) from error


def _stdin(name: str) -> Source | FileError:
    data = sys.stdin.buffer.read()
    return from_bytes(data, name, notebook=name.endswith(".ipynb"))


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


def _console(stream: TextIO):
    from rich.console import Console

    terminal = stream.isatty()
    return Console(file=stream, width=None if terminal else 200, no_color=not terminal or None,
                   highlight=False, soft_wrap=not terminal)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the command line and turn every failure into an exit code."""
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
