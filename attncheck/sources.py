"""What attncheck reads: a Source is Python text plus a way back to the user's file.

A plain file maps one to one. A notebook's code cells are joined into one
module (IPython magics and shell escapes commented out, so the text parses and
line numbers stay put) and each line remembers its cell, so a finding can say
``cell 3, line 7``. A Markdown file (a tutorial, where learners copy attention
from) keeps its fenced ``python`` blocks at their own lines and blanks every
other line, so a finding's line is the ``.md`` file's own.

Reading never raises for bad input: a file that cannot become a Source comes
back as a FileError with one plain sentence, so a run over thousands of files
reports it and goes on.
"""

from __future__ import annotations

import ast
import io
import json
import re
import stat
import tokenize
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from attncheck.findings import Span

STDIN = "-"

# A line IPython handles itself: ``%timeit``, ``!pip``, ``x = !ls``, ``obj?``.
_MAGIC_LINE = re.compile(r"^\s*(?:[%!]|\w+\s*=\s*[%!]|[\w.]+\?{1,2}\s*$)")
# Half of a UTF-16 pair alone: JSON's ``\ud800`` escape decodes to one, which no file can hold.
_SURROGATE = re.compile("[\ud800-\udfff]")
# A Markdown fence opening a Python block: up to three spaces (more inside a list item), ``` or ~~~.
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^\s`]*)")
_PYTHON_INFO = frozenset({"python", "py", "python3", "py3", "{python}", "{.python}"})
MARKDOWN_SUFFIXES = (".md", ".markdown")


@dataclass(frozen=True)
class Source:
    """Text to lint and where it came from (``-`` for stdin)."""

    path: str
    text: str
    # For notebooks: (first line of the cell in ``text``, 1-based cell number), sorted.
    cells: tuple[tuple[int, int], ...] = field(default=())
    # How the file's bytes were decoded, so that ``--fix`` writes them back the same way.
    encoding: str = "utf-8"
    # The Python blocks of a Markdown file, at their own lines (``--fix`` does not write there).
    markdown: bool = False

    @property
    def is_notebook(self) -> bool:
        return bool(self.cells)

    def locate(self, line: int, column: int = 1, end_line: int | None = None,
               end_column: int | None = None) -> Span:
        """A Span in the user's terms: file lines, or cell and line within the cell."""
        if not self.cells:
            return Span(line, column, end_line, end_column)
        starts = [start for start, _ in self.cells]
        index = max(bisect_right(starts, line) - 1, 0)
        start, cell = self.cells[index]
        end = end_line - start + 1 if end_line is not None else None
        return Span(line - start + 1, column, end, end_column, cell=cell)

    def file_line(self, span: Span) -> int:
        """The line of ``text`` a span points at (the inverse of ``locate``)."""
        if span.cell is None:
            return span.line
        start = next((start for start, cell in self.cells if cell == span.cell), 1)
        return start + span.line - 1


@dataclass(frozen=True)
class FileError:
    """A file that could not be checked, and why, in one sentence.

    ``level`` is ``note`` for something that is not a problem but is worth a
    word (an empty file named on the command line), ``error`` otherwise.
    """

    path: str
    message: str
    level: Literal["error", "note"] = "error"
    span: Span | None = None  # where, when the problem has a place (a syntax error)


def syntax_error(source: Source, fallback: str) -> FileError:
    """A file that does not parse, reported where Python puts the error and in its words
    (``'(' was never closed``), so ``path:line:col`` matches what ``python file.py`` says.
    ``fallback`` is the parser's own message, for text Python compiles after all."""
    return python_syntax_error(source) or FileError(source.path, fallback)


def python_syntax_error(source: Source) -> FileError | None:
    """Python's own syntax error of a text (its C parser: no libcst), or None when it compiles."""
    try:
        compile(source.text, source.path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        span = source.locate(error.lineno or 1, max(error.offset or 1, 1))
        return FileError(source.path, f"syntax error: {error.msg}", span=span)
    except (ValueError, RecursionError, MemoryError):
        pass
    return None


def read_path(path: Path, shown: str | None = None) -> Source | FileError:
    """Read a ``.py``, ``.ipynb`` or ``.md`` file from disk."""
    shown = shown if shown is not None else str(path)
    data = read_regular(path, shown)
    if isinstance(data, FileError):
        return data
    return from_named_bytes(data, shown, path.name)


def read_as(name: str) -> Literal["py", "ipynb", "md"]:
    """How a file of this name is read: Python, a notebook's code cells, or Markdown's Python blocks."""
    lowered = name.lower()
    if lowered.endswith(".ipynb"):
        return "ipynb"
    return "md" if lowered.endswith(MARKDOWN_SUFFIXES) else "py"


def from_named_bytes(data: bytes, shown: str, name: str) -> Source | FileError:
    """``from_bytes`` read the way the file's name says (``read_as``)."""
    kind = read_as(name)
    return from_bytes(data, shown, notebook=kind == "ipynb", markdown=kind == "md")


def special_kind(path: Path) -> str | None:
    """What ``path`` is when it is no regular file (``a FIFO``, ``a device``, ``a socket``), read
    from its status only: opening a FIFO with no writer blocks forever. None for a regular file,
    a folder, or a path that cannot be looked at (reading it then says why)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return None


def read_regular(path: Path, shown: str) -> bytes | FileError:
    """The bytes of a regular file; a FileError for a special file (never opened) or a failed read."""
    kind = special_kind(path)
    if kind is not None:
        return FileError(shown, f"not a regular file ({kind}): not read")
    try:
        return path.read_bytes()
    except OSError as error:
        return FileError(shown, f"cannot read file: {error.strerror or error}")


def from_bytes(data: bytes, shown: str, *, notebook: bool = False, markdown: bool = False) -> Source | FileError:
    """Decode a file's bytes (PEP 263 cookie and BOM honoured) into a Source."""
    if b"\x00" in data:
        return FileError(shown, "binary file (contains NUL bytes): not Python source")
    if notebook:
        return _notebook(data, shown)
    if markdown:
        return _markdown(data, shown)
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        if "unknown encoding" in str(error.msg):
            return FileError(shown, f"cannot decode file: {error.msg}")
        encoding = "utf-8"  # no declaration and the first lines are not UTF-8: say where below
    try:
        text = data.decode(encoding)
    except LookupError as error:
        return FileError(shown, f"cannot decode file: {error}")
    except UnicodeDecodeError as error:
        where = f"byte 0x{data[error.start]:02x} at offset {error.start}"
        return FileError(shown, f"not valid {error.encoding.upper()}: {where}")
    if text.startswith("\ufeff"):
        text = text[1:]
    return Source(shown, text, encoding=encoding)


def _notebook(data: bytes, shown: str) -> Source | FileError:
    try:
        document = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        return FileError(shown, f"invalid notebook: not UTF-8 (byte at offset {error.start})")
    except json.JSONDecodeError as error:
        return FileError(shown, f"invalid notebook: not JSON ({error.msg} at line {error.lineno})")
    except RecursionError:  # "[[[[...]]]]" 100 000 deep: the run and the other files go on
        return FileError(shown, "invalid notebook: its JSON is nested too deeply")
    cells = document.get("cells") if isinstance(document, dict) else None
    if not isinstance(cells, list):
        return FileError(shown, "invalid notebook: no list of cells")
    lines: list[str] = []
    starts: list[tuple[int, int]] = []
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        text = _cell_text(cell.get("source", ""))
        if text is None:
            return FileError(shown, f"invalid notebook: cell {number}'s source is not text or a list of lines")
        if _SURROGATE.search(text):
            return FileError(shown, f"invalid notebook: cell {number} holds a lone surrogate (not encodable text)")
        starts.append((len(lines) + 1, number))
        lines.extend(_code_lines(text))
    if not starts:
        return Source(shown, "", cells=())
    return Source(shown, "\n".join(lines) + "\n", cells=tuple(starts))


def _cell_text(source: object) -> str | None:
    """A cell's ``source`` as one text (nbformat: a string or a list of strings), else None."""
    if isinstance(source, str):
        return source
    if isinstance(source, list) and all(isinstance(line, str) for line in source):
        return "".join(source)
    return None


def _code_lines(cell_text: str) -> list[str]:
    """A code cell as Python lines: magics commented out, never an empty cell.

    A cell magic (``%%bash``) makes the whole cell foreign, so every line of it
    is commented out. Commenting keeps the line count, so cell lines stay exact.
    """
    lines = cell_text.splitlines() or [""]
    if lines[0].lstrip().startswith("%%"):
        return ["#" + line for line in lines]
    return ["#" + line if _MAGIC_LINE.match(line) else line for line in lines]


def _markdown(data: bytes, shown: str) -> Source | FileError:
    """The fenced Python blocks of a Markdown file at their own lines, every other line blank.

    A Markdown file has no encoding cookie: it is read as UTF-8. A block that does not compile
    on its own (a fragment with ``...``, a shell session mislabelled) is left out rather than
    failing the whole file, and so is an unclosed block."""
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        return FileError(shown, f"not valid UTF-8: byte 0x{data[error.start]:02x} at offset {error.start}")
    lines = text.splitlines()
    kept = [""] * len(lines)
    number = 0
    while number < len(lines):
        opening = _FENCE.match(lines[number])
        number += 1
        if opening is None:
            continue
        close = re.compile(rf"^\s*{re.escape(opening.group('fence')[0])}{{{len(opening.group('fence'))},}}\s*$")
        start = number
        while number < len(lines) and not close.match(lines[number]):
            number += 1
        if number < len(lines) and opening.group("info").lower() in _PYTHON_INFO:
            block = _dedented(lines[start:number], len(opening.group("indent")))
            if _compiles("\n".join(block)):
                kept[start:number] = block
        number += 1
    return Source(shown, "\n".join(kept) + "\n" if kept else "", markdown=True)


def _dedented(block: list[str], indent: int) -> list[str]:
    """A block's lines without the indentation of its fence (a block inside a list item)."""
    return [line[indent:] if not line[:indent].strip() else line.lstrip() for line in block]


def _compiles(text: str) -> bool:
    """Whether a block is Python on its own (the C parser: cheap, and it never hangs)."""
    try:
        compile(text, "<markdown>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True
