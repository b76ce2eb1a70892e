"""Reading files, notebooks and stdin into Sources, and every way that can fail."""

from __future__ import annotations

import json

from attncheck.sources import FileError, Source, from_bytes, read_as, read_path


def notebook(*cells: tuple[str, str]) -> bytes:
    return json.dumps({
        "cells": [{"cell_type": kind, "source": text.splitlines(keepends=True), "metadata": {}}
                  for kind, text in cells],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }).encode()


def test_plain_file_reads_as_utf8(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("x = 'é'\n", encoding="utf-8")
    source = read_path(path)
    assert source == Source(str(path), "x = 'é'\n")
    assert not source.is_notebook


def test_encoding_cookie_and_bom_are_honoured():
    latin = from_bytes(b"# -*- coding: latin-1 -*-\nx = '\xff'\n", "a.py")
    assert isinstance(latin, Source) and latin.encoding == "iso-8859-1" and "\xff" in latin.text
    bom = from_bytes(b"\xef\xbb\xbfx = 1\n", "b.py")
    assert isinstance(bom, Source) and bom.text == "x = 1\n"


def test_undecodable_binary_and_unknown_encoding_are_file_errors():
    assert from_bytes(b"x = '\xff'\n", "a.py") == FileError("a.py", "not valid UTF-8: byte 0xff at offset 5")
    assert "NUL" in from_bytes(b"a\x00b", "b.py").message
    assert "unknown encoding" in from_bytes(b"# coding: bogus\nx = 1\n", "c.py").message


def test_unreadable_path_is_a_file_error(tmp_path):
    folder = tmp_path / "looks_like.py"
    folder.mkdir()
    error = read_path(folder)
    assert isinstance(error, FileError) and error.message.startswith("cannot read file")


def test_notebook_joins_code_cells_and_maps_lines_back():
    data = notebook(("markdown", "# title"), ("code", "import torch\nx = 1"),
                    ("code", "y = 2\nz = torch.sqrt(64)"))
    source = from_bytes(data, "n.ipynb", notebook=True)
    assert source.text == "import torch\nx = 1\ny = 2\nz = torch.sqrt(64)\n"
    assert source.cells == ((1, 2), (3, 3))  # numbered as shown, markdown included
    span = source.locate(4, 5, 4, 18)
    assert (span.cell, span.line, span.column, span.end_line) == (3, 2, 5, 2)
    assert source.file_line(span) == 4


def test_notebook_magics_are_commented_out_keeping_lines():
    data = notebook(("code", "%matplotlib inline\n!pip install x\nfiles = !ls\nlen?\nx = 1"),
                    ("code", "%%bash\necho hi"))
    source = from_bytes(data, "n.ipynb", notebook=True)
    assert source.text.splitlines() == [
        "#%matplotlib inline", "#!pip install x", "#files = !ls", "#len?", "x = 1", "#%%bash", "#echo hi",
    ]


def test_notebook_errors_are_file_errors():
    assert "not JSON" in from_bytes(b"{nope", "a.ipynb", notebook=True).message
    assert "no list of cells" in from_bytes(b'{"cells": 3}', "b.ipynb", notebook=True).message
    empty = from_bytes(notebook(("markdown", "only words")), "c.ipynb", notebook=True)
    assert isinstance(empty, Source) and empty.text == ""


def test_a_notebook_nested_too_deeply_is_a_file_error_not_an_internal_one():
    """Issue 17: 100 000 nested brackets raised RecursionError out of the JSON decoder, which
    ended ``attncheck check`` for every file and made a graded notebook a "grader error"."""
    deep = from_bytes(b"[" * 100_000 + b"]" * 100_000, "deep.ipynb", notebook=True)
    assert isinstance(deep, FileError) and deep.message == "invalid notebook: its JSON is nested too deeply"


def test_markdown_keeps_python_blocks_at_their_lines_and_blanks_the_rest():
    text = (
        "# Title\n\n```python\nimport torch\n```\n\n```js\nlet x = 1;\n```\n"
        "- item\n\n  ~~~py\n  def f(q):\n      return q\n  ~~~\n\n```python\nbroken(:\n```\n```python\nx = 1\n"
    )
    source = from_bytes(text.encode(), "t.md", markdown=True)
    assert isinstance(source, Source) and source.markdown and not source.is_notebook
    lines = source.text.splitlines()
    assert len(lines) == len(text.splitlines())
    assert lines[3] == "import torch" and lines[7] == ""  # the js block is blank
    assert lines[12:14] == ["def f(q):", "    return q"]  # dedented by its fence's indent
    assert lines[17] == "" and lines[20] == ""  # a block that does not compile, an unclosed one
    assert source.locate(13, 5).line == 13


def test_markdown_is_read_by_name_and_not_decoded_as_python(tmp_path):
    path = tmp_path / "README.md"
    path.write_bytes("# coding: Teaching\n\n```python\nx = 'é'\n```\n".encode())
    source = read_path(path)
    assert isinstance(source, Source) and source.markdown and source.text.splitlines()[3] == "x = 'é'"
    assert read_as("notes.MARKDOWN") == "md" and read_as("a.ipynb") == "ipynb" and read_as("a.py") == "py"
    assert "not valid UTF-8" in from_bytes(b"\xff```", "b.md", markdown=True).message
