"""Which files are checked under which settings: nearest config per file, --force-exclude, empty paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_cli import BUG, invoke

SEED = Path(__file__).parent.parent / "fixtures" / "seeds" / "seed003_review.py"  # mistakes of ATT1, ATT2, ATT3


def codes_by_path(result) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for f in json.loads(result.stdout)["findings"]:
        found.setdefault(f["path"], []).append(f["code"])
    return found


@pytest.fixture
def two_projects(tmp_path: Path) -> Path:
    """The user's ``repros/config-per-project``: one model, two projects whose settings differ."""
    for name, setting in (("projA", 'ignore = ["ATT1", "ATT2"]'), ("projB", 'select = ["ATT1"]')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "m.py").write_text(SEED.read_text())
        (tmp_path / name / "pyproject.toml").write_text(f"[tool.attncheck]\n{setting}\n")
    return tmp_path


def test_each_file_gets_its_nearest_config_whatever_the_argument_order(two_projects):
    forward = invoke("--format", "json", "--no-cache", "projA", "projB", cwd=two_projects)
    backward = invoke("--format", "json", "--no-cache", "projB", "projA", cwd=two_projects)
    assert codes_by_path(forward) == codes_by_path(backward)
    found = codes_by_path(forward)
    assert found["projB/m.py"] and all(code.startswith("ATT1") for code in found["projB/m.py"])  # select ATT1
    assert found["projA/m.py"] and not any(code.startswith(("ATT1", "ATT2")) for code in found["projA/m.py"])


def test_force_exclude_applies_exclude_to_named_files(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.attncheck]\nexclude = ["vendored/"]\n')
    (tmp_path / "vendored").mkdir()
    (tmp_path / "vendored" / "model.py").write_text(BUG)
    named = invoke("--format", "json", "vendored/model.py", cwd=tmp_path)
    assert named.exit_code == 1 and codes_by_path(named) == {"vendored/model.py": ["ATT204"]}
    forced = invoke("--format", "json", "--force-exclude", "vendored/model.py", cwd=tmp_path)
    assert forced.exit_code == 0
    assert json.loads(forced.stdout)["findings"] == []
    assert "no Python file" not in forced.stderr  # excluded on purpose: no warning


def test_a_path_with_no_file_is_a_warning(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("nothing to check\n")
    result = invoke("empty", cwd=tmp_path)
    assert result.exit_code == 0
    assert "warning: empty: no Python file or notebook to check there" in result.stderr


def test_a_file_named_again_or_found_in_a_named_folder_is_checked_once(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "model.py").write_text(BUG)
    result = invoke("--format", "json", "--no-cache", "pkg/model.py", "pkg/model.py", "./pkg/model.py", "pkg",
                    cwd=tmp_path)
    document = json.loads(result.stdout)
    assert [f["path"] for f in document["findings"]] == ["pkg/model.py"]
    assert document["summary"]["files"] == 1


def test_a_folder_asked_after_its_parent_still_finds_its_own_config(tmp_path):
    """Each folder's nearest configuration is remembered on the way up: a folder first met
    through a sibling's search (its parent, the root) must not hide a configuration of a
    folder met later, nor one deeper down."""
    deep = tmp_path / "proj" / "models" / "v1"
    deep.mkdir(parents=True)
    (tmp_path / "proj" / "attncheck.toml").write_text('select = ["ATT1"]\n')
    (tmp_path / "other").mkdir()
    for folder in (deep, tmp_path / "other", tmp_path / "proj"):
        (folder / "m.py").write_text(SEED.read_text())
    result = invoke("--format", "json", "--no-cache", "other/m.py", "proj/models/v1/m.py", "proj/m.py", cwd=tmp_path)
    found = codes_by_path(result)
    assert any(not code.startswith("ATT1") for code in found["other/m.py"])  # no configuration: every rule
    for configured in ("proj/models/v1/m.py", "proj/m.py"):
        assert found[configured] and all(code.startswith("ATT1") for code in found[configured])
