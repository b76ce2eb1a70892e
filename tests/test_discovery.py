"""Each file is checked once, however many ways the command line names it, and
gitignore-style patterns are compiled only when a walk needs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attncheck.discovery import Excluder, discover, real_path

ROOT = Path(__file__).resolve().parent.parent


def shown(paths: list[str]) -> list[str]:
    return [candidate.shown for candidate in discover(paths)]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "model.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "other.py").write_text("y = 2\n")
    return tmp_path


def test_a_file_named_twice_is_checked_once(tree):
    file = str(tree / "pkg" / "model.py")
    assert shown([file, file]) == [file]


def test_a_file_named_and_walked_is_checked_once(tree):
    file = str(tree / "pkg" / "model.py")
    assert shown([file, str(tree / "pkg")]) == [file, os.path.join(str(tree / "pkg"), "other.py")]


def test_a_path_through_a_parent_step_is_the_same_file(tree):
    file = str(tree / "pkg" / "model.py")
    assert shown([file, str(tree / "pkg" / ".." / "pkg" / "model.py")]) == [file]


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links need privileges on Windows")
def test_links_to_a_file_or_a_folder_are_the_same_file(tree):
    (tree / "link.py").symlink_to(tree / "pkg" / "model.py")
    (tree / "folder").symlink_to(tree / "pkg", target_is_directory=True)
    file = str(tree / "pkg" / "model.py")
    assert shown([file, str(tree / "link.py"), str(tree / "folder" / "model.py")]) == [file]


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links need privileges on Windows")
def test_a_parent_step_after_a_link_follows_the_link(tree):
    (tree / "deep").mkdir()
    (tree / "deep" / "model.py").write_text("z = 3\n")
    (tree / "pkg" / "jump").symlink_to(tree / "deep" / "model.py")
    (tree / "up").symlink_to(tree / "pkg", target_is_directory=True)
    # ``up/../pkg/model.py`` is ``pkg/model.py`` only lexically: ``up`` is pkg, so ``up/..`` is tree.
    files = [str(tree / "pkg" / "model.py"), str(tree / "up" / ".." / "pkg" / "model.py")]
    assert shown(files) == files[:1]


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links need privileges on Windows")
def test_real_paths_are_realpath_through_links_at_every_depth(tree):
    (tree / "a" / "b" / "c").mkdir(parents=True)
    (tree / "a" / "b" / "c" / "model.py").write_text("x = 1\n")
    (tree / "a" / "b" / "c" / "other.py").write_text("y = 2\n")
    (tree / "top").symlink_to(tree / "a", target_is_directory=True)
    (tree / "a" / "mid").symlink_to(tree / "a" / "b", target_is_directory=True)
    (tree / "a" / "b" / "chain").symlink_to(tree / "top" / "mid" / "c", target_is_directory=True)
    folders = [tree / "a" / "b" / "c", tree / "top" / "b" / "c", tree / "a" / "mid" / "c",
               tree / "top" / "mid" / "c", tree / "a" / "b" / "chain", tree / "top" / "mid" / "chain"]
    real_folders: dict[str, str] = {}
    for folder in folders:  # one cache across them, as in a run: a folder seen first must not mislead
        for name in ("model.py", "other.py"):
            path = folder / name
            assert real_path(path, real_folders) == os.path.realpath(path)
    assert len(shown([str(folder / "model.py") for folder in folders])) == 1


def test_exclude_patterns_apply_to_walked_files(tree):
    excluder = Excluder(["other.py"], tree)
    walked = [c.shown for c in discover([str(tree / "pkg")], excluder)]
    assert walked == [os.path.join(str(tree / "pkg"), "model.py")]


def test_a_run_over_named_files_never_imports_pathspec(tree):
    code = (
        "import sys; from attncheck.cli import main; "
        f"sys.argv = ['attncheck', '--static-only', '--no-cache', {str(tree / 'pkg' / 'model.py')!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('pathspec' in sys.modules)"
    )
    (tree / "pyproject.toml").write_text('[tool.attncheck]\nexclude = ["build/"]\n')
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tree, env=env, check=True)
    assert result.stdout.strip().splitlines()[-1] == "False"
