"""The command line end to end: routing, commands, inputs, options, formats.

ATT204 (``torch.sqrt(64)``) is the planted bug throughout: it is the rule that
exists whatever else the static rules grow into.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from attncheck import __version__
from attncheck.catalogue import CODES
from attncheck.cli import cli

ROOT = Path(__file__).resolve().parent.parent
BUG = "import torch\n\ndef attend(q, k):\n    return q @ k / torch.sqrt(64)\n"
CLEAN = "import math\n\ndef attend(q, k):\n    return q @ k / math.sqrt(64)\n"


def invoke(*args: str, stdin: str | None = None, cwd: Path | None = None):
    runner = CliRunner()
    previous = Path.cwd()
    os.chdir(cwd or previous)
    try:
        return runner.invoke(cli, ["--static-only", *args] if args and args[0] not in ("rules", "rule")
                             else list(args), input=stdin, catch_exceptions=False)
    finally:
        os.chdir(previous)


def findings(result) -> list[tuple[str, str, int]]:
    return [(f["code"], f["path"], f["line"]) for f in json.loads(result.stdout)["findings"]]


def subprocess_run(*args: str, cwd: Path, stdin: str | None = None, env: dict | None = None):
    return subprocess.run([sys.executable, *args], cwd=cwd, input=stdin, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=120)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "model.py").write_text(BUG)
    (tmp_path / "clean.py").write_text(CLEAN)
    return tmp_path


def test_check_is_the_default_command(project):
    implicit = invoke("--format", "json", "model.py", cwd=project)
    explicit = CliRunner().invoke(cli, ["check", "--static-only", "--format", "json",
                                        str(project / "model.py")])
    assert implicit.exit_code == explicit.exit_code == 1
    assert findings(implicit) == [("ATT204", "model.py", 4)]
    assert [f[0] for f in findings(explicit)] == ["ATT204"]


def test_text_output_for_a_bug(project):
    result = invoke("model.py", cwd=project)
    assert result.exit_code == 1
    assert "model.py:4:20: ATT204 [error] torch.sqrt(64)" in result.stdout
    assert " > 4 |     return q @ k / torch.sqrt(64)" in result.stdout
    assert "hint: use math.sqrt(64)" in result.stdout
    assert result.stdout.rstrip().endswith("Found 1 problem (1 error) in 1 file")


def test_version_and_help():
    assert CliRunner().invoke(cli, ["--version"]).stdout.strip() == f"attncheck, version {__version__}"
    help_text = CliRunner().invoke(cli, ["--help"]).stdout
    assert "rules" in help_text and "check" in help_text
    assert "--static-only" in CliRunner().invoke(cli, ["check", "--help"]).stdout


def test_rules_lists_every_code():
    result = invoke("rules")
    assert result.exit_code == 0
    for info in CODES.values():
        assert info.code in result.stdout and info.name in result.stdout
    assert "ATT204  sqrt-of-number" in result.stdout


@pytest.mark.parametrize("name", ["ATT204", "att204", "sqrt-of-number"])
def test_rule_prints_the_doc_by_code_or_name(name):
    result = invoke("rule", name)
    assert result.exit_code == 0
    assert result.stdout.startswith("# ATT204 sqrt-of-number")


def test_unknown_rule_is_a_usage_error():
    result = CliRunner().invoke(cli, ["rule", "ATT999"])
    assert result.exit_code == 2
    assert "unknown code 'ATT999'" in result.output


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "github", "junit"])
def test_every_format_runs_and_names_the_bug(project, fmt):
    result = invoke("--format", fmt, "model.py", "clean.py", cwd=project)
    assert result.exit_code == 1
    assert "ATT204" in result.stdout


def test_select_and_ignore(project):
    assert findings(invoke("--format", "json", "--ignore", "ATT2", "model.py", cwd=project)) == []
    assert findings(invoke("--format", "json", "--select", "ATT1,ATT3", "model.py", cwd=project)) == []
    selected = invoke("--format", "json", "--select", "ATT1", "--select", "ATT204", "model.py", cwd=project)
    assert [f[0] for f in findings(selected)] == ["ATT204"]
    bad = invoke("--select", "ATT77", "model.py", cwd=project)
    assert bad.exit_code == 2 and "unknown code or prefix 'ATT77'" in bad.output


def test_config_file_and_command_line_precedence(project):
    (project / "pyproject.toml").write_text("[tool.attncheck]\nignore = ['ATT204']\n")
    assert invoke("--format", "json", "model.py", cwd=project).exit_code == 0
    assert invoke("--format", "json", "--ignore", "ATT3", "model.py", cwd=project).exit_code == 1
    (project / "other.toml").write_text("select = ['ATT2']\n")
    assert invoke("--config", "other.toml", "model.py", cwd=project).exit_code == 1
    missing = invoke("--config", "nope.toml", "model.py", cwd=project)
    assert missing.exit_code == 2 and "no such file" in missing.output


def test_per_file_ignores_and_exclude(project):
    (project / "pkg").mkdir()
    (project / "pkg" / "a.py").write_text(BUG)
    (project / "vendor").mkdir()
    (project / "vendor" / "b.py").write_text(BUG)
    (project / "pyproject.toml").write_text("[tool.attncheck]\nexclude = ['vendor/']\n"
                                            "[tool.attncheck.per-file-ignores]\n'pkg/*.py' = ['ATT204']\n")
    result = invoke("--format", "json", ".", cwd=project)
    assert findings(result) == [("ATT204", "model.py", 4)]
    assert json.loads(result.stdout)["summary"]["files"] == 3  # clean.py, model.py, pkg/a.py


def test_directory_walk_skips_gitignored_venvs_and_build_dirs(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("generated/\n*_ignored.py\n")
    for relative in ("src/model.py", "src/x_ignored.py", "generated/g.py", "build/b.py", "env/lib/v.py",
                     ".venv/v.py", "node_modules/n.py", "src/__pycache__/c.py", "notes.txt"):
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(BUG)
    (tmp_path / "env" / "pyvenv.cfg").write_text("home = /usr\n")
    result = invoke("--format", "json", ".", cwd=tmp_path)
    assert findings(result) == [("ATT204", os.path.join("src", "model.py"), 4)]
    named = invoke("--format", "json", "src/x_ignored.py", cwd=tmp_path)  # named explicitly: checked
    assert [f[0] for f in findings(named)] == ["ATT204"]


def test_an_ignored_directory_named_explicitly_is_checked_with_the_other_patterns(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("cache/\n*_ignored.py\n")
    for relative in ("cache/wheel/model.py", "cache/wheel/x_ignored.py"):
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(BUG)
    result = invoke("--format", "json", "cache/wheel", cwd=tmp_path)
    assert findings(result) == [("ATT204", os.path.join("cache", "wheel", "model.py"), 4)]
    assert findings(invoke("--format", "json", ".", cwd=tmp_path)) == []


def test_stdin_with_and_without_a_filename():
    plain = invoke("--format", "json", "-", stdin=BUG)
    assert findings(plain) == [("ATT204", "-", 4)]
    named = invoke("--format", "json", "--stdin-filename", "pkg/m.py", "-", stdin=BUG)
    assert findings(named) == [("ATT204", "pkg/m.py", 4)]


def write_notebook(path: Path) -> Path:
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Attention"]},
        {"cell_type": "code", "metadata": {}, "execution_count": 1, "outputs": [],
         "source": ["%matplotlib inline\n", "import torch\n"]},
        {"cell_type": "code", "metadata": {}, "execution_count": 2, "outputs": [],
         "source": ["!nvidia-smi\n", "scores = torch.ones(2, 2)\n", "scores = scores / torch.sqrt(64)\n"]},
    ]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_notebook_findings_name_cell_and_line(tmp_path):
    write_notebook(tmp_path / "attention.ipynb")
    text = invoke("attention.ipynb", cwd=tmp_path)
    assert text.exit_code == 1
    assert "attention.ipynb:cell 3:3:19: ATT204 [error]" in text.stdout
    assert " > 3 | scores = scores / torch.sqrt(64)" in text.stdout
    document = json.loads(invoke("--format", "json", ".", cwd=tmp_path).stdout)
    assert [(f["cell"], f["line"]) for f in document["findings"]] == [(3, 3)]


TUTORIAL = """# Attention, the tutorial ("Teaching" is no encoding)

```bash
pip install torch
```

```python
import torch
```

1. The scores:

   ```python
   def attend(q, k):
       return q @ k / torch.sqrt(64)
   ```

```python
def fragment(q, k):
    return q @ k /
```
"""


def test_markdown_python_blocks_are_checked_at_the_files_own_lines(tmp_path):
    (tmp_path / "tutorial.md").write_text(TUTORIAL)
    (tmp_path / "notes.markdown").write_text("no code here\n")
    explicit = invoke("--format", "json", "tutorial.md", cwd=tmp_path)
    assert explicit.exit_code == 1
    assert findings(explicit) == [("ATT204", "tutorial.md", 15)]
    walked = invoke("--format", "json", ".", cwd=tmp_path)
    assert findings(walked) == [("ATT204", "tutorial.md", 15)] and not json.loads(walked.stdout)["errors"]


def test_fix_leaves_a_markdown_file_alone(tmp_path):
    path = tmp_path / "tutorial.md"
    path.write_text(TUTORIAL)
    result = invoke("--fix", "tutorial.md", cwd=tmp_path)
    assert result.exit_code == 1 and "ATT204" in result.stdout
    assert path.read_text() == TUTORIAL


def test_bad_files_are_each_reported_and_the_run_goes_on(tmp_path):
    (tmp_path / "syntax.py").write_text("def broken(:\n")
    (tmp_path / "latin.py").write_bytes(b"x = '\xe9'\n")
    (tmp_path / "empty.py").write_text("")
    (tmp_path / "binary.py").write_bytes(b"\x00\x01\x02")
    (tmp_path / "bad.ipynb").write_text("{not json")
    (tmp_path / "model.py").write_text(BUG)
    names = ["syntax.py", "latin.py", "empty.py", "binary.py", "bad.ipynb", "model.py"]
    result = invoke("--format", "json", *names, cwd=tmp_path)
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    errors = {e["path"]: (e["level"], e["message"]) for e in document["errors"]}
    assert errors["syntax.py"][1] == "syntax error: invalid syntax"  # at 1:12, where Python puts it
    assert [(e["line"], e["column"]) for e in document["errors"] if e["path"] == "syntax.py"] == [(1, 12)]
    assert errors["latin.py"][1] == "not valid UTF-8: byte 0xe9 at offset 5"
    assert errors["empty.py"] == ("note", "empty file: nothing to check")
    assert "NUL" in errors["binary.py"][1] and "not JSON" in errors["bad.ipynb"][1]
    assert findings(result) == [("ATT204", "model.py", 4)]
    text = subprocess_run("-m", "attncheck", "--static-only", *names, cwd=tmp_path)
    assert text.returncode == 1 and "Traceback" not in text.stdout + text.stderr
    assert "4 files could not be checked" in text.stdout


def test_missing_path_is_a_usage_error(tmp_path):
    result = invoke("nowhere.py", cwd=tmp_path)
    assert result.exit_code == 2 and "no such file or directory: nowhere.py" in result.output


def test_diff_shows_fixes_and_fix_writes_them(project, monkeypatch):
    from attncheck import pipeline
    from attncheck.findings import Edit
    from attncheck.static.rules.att2_scores.sqrt_of_number import SqrtOfNumber

    class FixingSqrt(SqrtOfNumber):
        def report(self, node, message, **kwargs):
            start = self.context.source.text.index("torch.sqrt(64)")
            super().report(node, message, **{**kwargs, "fix": [Edit(start, start + 14, "8.0")]})

    monkeypatch.setattr(pipeline, "_rules", lambda codes: (FixingSqrt,))
    diff = invoke("--diff", "model.py", cwd=project)
    assert diff.exit_code == 1
    assert "-    return q @ k / torch.sqrt(64)\n+    return q @ k / 8.0" in diff.stdout
    assert (project / "model.py").read_text() == BUG  # --diff never writes
    fixed = invoke("--fix", "model.py", cwd=project)
    assert fixed.exit_code == 0
    assert (project / "model.py").read_text() == BUG.replace("torch.sqrt(64)", "8.0")
    assert "1 fixed, 0 remaining" in fixed.stderr


def test_many_files_run_quickly_in_parallel(tmp_path):
    for index in range(2000):
        (tmp_path / f"m{index:04d}.py").write_text(f"import math\nx{index} = math.sqrt({index})\n")
    (tmp_path / "m0999.py").write_text(BUG)
    start = time.perf_counter()
    result = invoke("--format", "json", "--jobs", "2", ".", cwd=tmp_path)
    elapsed = time.perf_counter() - start
    document = json.loads(result.stdout)
    assert document["summary"]["files"] == 2000
    assert findings(result) == [("ATT204", "m0999.py", 4)]
    assert elapsed < 30, f"2000 files took {elapsed:.1f}s"


def test_static_only_never_imports_torch(project):
    result = subprocess_run("-X", "importtime", "-m", "attncheck", "--static-only", "model.py", cwd=project)
    assert result.returncode == 1
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")]
    assert "attncheck.static.engine" in imported  # the measurement saw the run
    assert not [name for name in imported if name == "torch" or name.startswith("torch.")]


def test_python_dash_m_runs_the_dynamic_stage_or_says_why_not(project):
    result = subprocess_run("-m", "attncheck", "--format", "json", "model.py", cwd=project)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert json.loads(result.stdout)["findings"][0]["code"] == "ATT204"


def test_readme_lists_every_code():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for info in CODES.values():
        assert f"| {info.code} | {info.name} |" in readme


def test_isolated_ignores_the_configuration_beside_the_checked_files(project):
    """Issue 17 item 3: an ``ignore = ["ATT"]`` planted next to a submission silences nothing."""
    (project / "attncheck.toml").write_text("ignore = ['ATT']\n")
    assert invoke("--format", "json", "model.py", cwd=project).exit_code == 0
    isolated = invoke("--format", "json", "--isolated", "model.py", cwd=project)
    assert isolated.exit_code == 1 and findings(isolated) == [("ATT204", "model.py", 4)]


def test_output_format_statistics_and_their_conflicts(project):
    concise = invoke("--output-format", "concise", "model.py", cwd=project)
    assert concise.stdout.splitlines()[0].startswith("model.py:4:") and "ATT204 torch.sqrt(64)" in concise.stdout
    as_json = invoke("--output-format", "json", "model.py", cwd=project)
    assert findings(as_json) == [("ATT204", "model.py", 4)]
    statistics = invoke("--statistics", "model.py", cwd=project)
    assert statistics.stdout.splitlines()[0] == "1  ATT204  [*] sqrt-of-number"
    clash = invoke("--format", "json", "--output-format", "concise", "model.py", cwd=project)
    assert clash.exit_code == 2 and "disagree" in clash.stderr
    machine = invoke("--format", "sarif", "--statistics", "model.py", cwd=project)
    assert machine.exit_code == 2 and "--statistics is a human report" in machine.stderr


def test_select_by_rule_name_and_empty_select(project):
    by_name = invoke("--format", "json", "--select", "sqrt-of-number", "model.py", cwd=project)
    assert findings(by_name) == [("ATT204", "model.py", 4)]
    empty = invoke("--select", "", "model.py", cwd=project)
    assert empty.exit_code == 2 and "no code given" in empty.stderr
