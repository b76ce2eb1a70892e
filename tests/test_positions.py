"""Positions a user's tools can open: syntax errors where Python puts them, notebook findings in the .ipynb."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_cli import invoke

BROKEN = "import torch\n\ndef f(q, k):\n    return q @ k /\n\nx = 1\n"
CELLS = ["# A notebook\n", "import torch\n", "def attend(q, k):\n    return q @ k / torch.sqrt(64)\n"]


def notebook(path: Path, cells: list[str], *, indent: int | None) -> None:
    """A notebook with a markdown cell first, then code cells, saved as Jupyter does (indent=1) or compact."""
    document = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": cells[0].splitlines(keepends=True)}]
                + [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                    "source": text.splitlines(keepends=True)} for text in cells[1:]],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(document, indent=indent, ensure_ascii=False), encoding="utf-8")


def test_a_syntax_error_is_where_python_puts_it(tmp_path):
    (tmp_path / "broken.py").write_text(BROKEN)
    text = invoke("--no-cache", "broken.py", cwd=tmp_path)
    assert text.stdout.splitlines()[0] == "broken.py:4:19: error: syntax error: invalid syntax"
    document = json.loads(invoke("--no-cache", "--format", "json", "broken.py", cwd=tmp_path).stdout)
    assert (document["errors"][0]["line"], document["errors"][0]["column"]) == (4, 19)
    github = invoke("--no-cache", "--format", "github", "broken.py", cwd=tmp_path).stdout
    assert github.startswith("::error file=broken.py,line=4,col=19,title=attncheck::syntax error: invalid syntax")
    sarif = json.loads(invoke("--no-cache", "--format", "sarif", "broken.py", cwd=tmp_path).stdout)
    [notification] = sarif["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert notification["locations"][0]["physicalLocation"]["region"] == {"startLine": 4, "startColumn": 19}


@pytest.mark.parametrize("indent", [1, None])
def test_notebook_findings_point_into_the_ipynb_text(tmp_path, indent):
    path = tmp_path / "nb.ipynb"
    notebook(path, CELLS, indent=indent)
    raw = path.read_text(encoding="utf-8")
    sarif = json.loads(invoke("--no-cache", "--format", "sarif", "nb.ipynb", cwd=tmp_path).stdout)
    [result] = sarif["runs"][0]["results"]
    location = result["locations"][0]
    region = location["physicalLocation"]["region"]
    assert location["physicalLocation"]["artifactLocation"]["uri"] == "nb.ipynb"
    assert raw[region["charOffset"]:].startswith("torch.sqrt(64)")
    line = raw.splitlines()[region["startLine"] - 1]
    assert line[region["startColumn"] - 1:].startswith("torch.sqrt(64)")
    assert location["logicalLocations"] == [{"name": "cell 3", "kind": "module"}]
    assert result["message"]["text"].startswith("cell 3, line 2, column 20: ")
    github = invoke("--no-cache", "--format", "github", "nb.ipynb", cwd=tmp_path).stdout
    assert f"file=nb.ipynb,line={region['startLine']},col={region['startColumn']}," in github
    assert "::cell 3, line 2, column 20: torch.sqrt(64)" in github


def test_a_notebook_diff_is_not_offered(tmp_path):
    path = tmp_path / "nb.ipynb"
    notebook(path, CELLS, indent=1)
    result = invoke("--no-cache", "--diff", "nb.ipynb", cwd=tmp_path)
    assert result.exit_code == 1 and result.stdout == ""
    assert "nb.ipynb: no diff for a notebook" in result.stderr and "cell 3 line 2 (ATT204)" in result.stderr
