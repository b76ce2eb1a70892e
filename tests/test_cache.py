"""The static-result cache: hits, misses, invalidation, damage, and the light warm path."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from attncheck import cache as cache_module
from attncheck import pipeline
from attncheck.cli import cli
from attncheck.config import Settings, with_overrides
from attncheck.discovery import discover
from attncheck.report import writer

ROOT = Path(__file__).resolve().parent.parent
BUGGY = (
    "import torch, math\n\n"
    "def attn(q, k, v):\n"
    "    s = q @ k.transpose(-2, -1) / math.sqrt(64)\n"
    "    return torch.softmax(s, dim=0) @ v\n"
)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("ATTNCHECK_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def linted(monkeypatch) -> list[str]:
    """The paths the pipeline really lints (cache misses), in order."""
    seen: list[str] = []
    real = pipeline.lint_source

    def spy(source, codes):
        seen.append(source.path)
        return real(source, codes)

    monkeypatch.setattr(pipeline, "lint_source", spy)
    return seen


def run(paths: list[Path], settings: Settings | None = None, use_cache: bool = True, jobs: int = 1) -> str:
    outcome, _ = pipeline.run(list(discover([str(p) for p in paths])), settings or Settings(),
                              static_only=True, jobs=jobs, use_cache=use_cache)
    stream = io.StringIO()
    writer("json")(outcome, stream)
    return stream.getvalue()


def test_second_run_is_answered_from_the_cache_with_the_same_report(tmp_path, cache_dir, linted):
    file = tmp_path / "bug.py"
    file.write_text(BUGGY)
    cold = run([file])
    assert linted == [str(file)] and "ATT" in cold
    warm = run([file])
    assert linted == [str(file)], "the second run linted again"
    assert warm == cold


def test_same_bytes_under_another_name_reuse_the_entry_with_their_own_path(tmp_path, cache_dir, linted):
    first, second = tmp_path / "a.py", tmp_path / "b.py"
    first.write_text(BUGGY)
    run([first])
    second.write_text(BUGGY)
    report = json.loads(run([second]))
    assert linted == [str(first)]
    assert report["findings"] and {f["path"] for f in report["findings"]} == {str(second)}


def test_changed_content_is_linted_again(tmp_path, cache_dir, linted):
    file = tmp_path / "bug.py"
    file.write_text(BUGGY)
    run([file])
    file.write_text(BUGGY.replace("dim=0", "dim=-1"))
    run([file])
    assert linted == [str(file), str(file)]


def test_a_new_version_or_rule_selection_does_not_read_old_entries(tmp_path, cache_dir, linted, monkeypatch):
    file = tmp_path / "bug.py"
    file.write_text(BUGGY)
    run([file])
    run([file], with_overrides(Settings(), select=("ATT2",), ignore=(), timeout=None, device=None))
    assert len(linted) == 2
    monkeypatch.setattr(cache_module, "__version__", "999.0")
    run([file])
    assert len(linted) == 3


@pytest.mark.parametrize("module", ["static/rules/att2_scores/__init__.py", "static/analysis/__init__.py",
                                    "catalogue.py", "config.py"])
def test_an_edited_module_of_the_static_pass_does_not_read_old_entries(module, tmp_path, cache_dir, linted,
                                                                       monkeypatch):
    """An editable install: attncheck's code changes under the same version (seen on a bench that kept
    printing the first run's findings after the rules were edited); the rules live in folders by question."""
    package = tmp_path / "attncheck"
    for file in Path(cache_module.__file__).parent.rglob("*.py"):
        copy = package / file.relative_to(Path(cache_module.__file__).parent)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(file.read_bytes())
    monkeypatch.setattr(cache_module, "_PACKAGE", package)
    file = tmp_path / "bug.py"
    file.write_text(BUGGY)
    run([file])
    run([file])
    assert len(linted) == 1
    (package / module).write_text((package / module).read_text() + "\n# edited\n")
    run([file])
    assert len(linted) == 2
    (package / "dynamic" / "runner.py").write_text("# the dynamic pass: no static result depends on it\n")
    run([file])
    assert len(linted) == 2


def test_corrupted_entries_are_ignored_and_replaced(tmp_path, cache_dir, linted):
    file = tmp_path / "bug.py"
    file.write_text(BUGGY)
    cold = run([file])
    entries = list(cache_dir.rglob("*.json"))
    assert len(entries) == 1
    for damage in (b"{not json", b'{"findings": [["ATT1"]], "targets": [], "error": null}', b"[]"):
        entries[0].write_bytes(damage)
        assert run([file]) == cold
    assert len(linted) == 4


def test_an_unwritable_cache_never_breaks_a_run(tmp_path, monkeypatch, linted):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("ATTNCHECK_CACHE_DIR", str(blocker))
    file = tmp_path / "bug.py"
    file.write_text(BUGGY)
    assert run([file]) == run([file])
    assert len(linted) == 2


def test_no_cache_flag_neither_reads_nor_writes(tmp_path, cache_dir, linted):
    file = tmp_path / "bug.py"
    file.write_text(BUGGY)
    runner = CliRunner()
    for _ in range(2):
        result = runner.invoke(cli, ["--static-only", "--no-cache", "--format", "json", str(file)])
        assert result.exit_code == 1, result.output
    assert not cache_dir.exists()
    runner.invoke(cli, ["--static-only", "--format", "json", str(file)])
    assert cache_dir.exists()


def test_default_location_is_the_user_cache_never_the_project(monkeypatch, tmp_path):
    monkeypatch.delenv("ATTNCHECK_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_module.default_dir() == tmp_path / "xdg" / "attncheck"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_module.default_dir() == Path.home() / ".cache" / "attncheck"


def test_fixtures_cold_and_warm_give_the_same_report(cache_dir, linted):
    fixtures = ROOT / "fixtures"
    cold = run([fixtures])
    count = len(linted)
    warm = run([fixtures])
    assert len(linted) == count and count > 20
    assert warm == cold == run([fixtures], use_cache=False)


def test_a_pooled_run_over_hits_and_misses_reports_as_a_run_without_cache(tmp_path, cache_dir):
    # Files of different sizes (the pool looks them up largest first), every other one cached.
    files = []
    for n in range(pipeline.POOL_THRESHOLD + 6):
        file = tmp_path / f"m{n:03}.py"
        file.write_text(BUGGY.replace("64", str(n + 1)) + "# padding\n" * (n * 7 % 11))
        files.append(file)
    run(files[::2])
    codes = pipeline.enabled_codes(Settings())
    results = list(pipeline.lint_all(discover([str(f) for f in files]), codes, 2, pipeline.open_cache(codes)))
    assert [r.source.path for r in results] == [str(f) for f in files]  # in order, each with its own answer
    assert all(f.path == r.source.path for r in results for f in r.findings) and results[1].findings
    assert run(files, jobs=2) == run(files, use_cache=False)


def test_a_warm_run_loads_neither_libcst_nor_a_process_pool(tmp_path, cache_dir):
    for n in range(pipeline.POOL_THRESHOLD + 1):
        (tmp_path / f"m{n}.py").write_text(BUGGY.replace("64", str(n + 1)))
    script = (
        "import sys\n"
        "from attncheck.cli import main\n"
        "try:\n"
        f"    main(['--static-only', '--format', 'json', '-o', {os.devnull!r}, {str(tmp_path)!r}])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('libcst', 'torch', 'concurrent.futures.process'))))\n"
    )
    env = {**os.environ, "ATTNCHECK_CACHE_DIR": str(cache_dir)}
    cold = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT)
    assert "concurrent.futures.process" in cold.stdout, cold.stderr  # the cold run linted in a pool
    warm = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT)
    assert warm.stdout.strip() == "[]", warm.stderr
