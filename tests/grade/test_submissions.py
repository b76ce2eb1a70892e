"""Finding and staging submissions: one per entry, notebooks as scripts, zips extracted safely."""

from __future__ import annotations

import inspect
import json
import os
import stat
import sys
import zipfile
from pathlib import Path

import pytest

from attncheck.grade import submissions
from attncheck.grade.submissions import UnreadableError

CODE = "import torch\n\ndef attention(q, k, v):\n    return torch.softmax(q @ k.transpose(-2, -1), -1) @ v\n"


def _class(tmp_path: Path) -> Path:
    root = tmp_path / "class"
    (root / "alice").mkdir(parents=True)
    (root / "alice" / "attention.py").write_text(CODE)
    (root / "bob.py").write_text(CODE)
    cells = [{"cell_type": "markdown", "source": "# hi"},
             {"cell_type": "code", "source": ["%matplotlib inline\n", "x = 1"]},
             {"cell_type": "code", "source": CODE}]
    notebook = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (root / "carol.ipynb").write_text(json.dumps(notebook))
    with zipfile.ZipFile(root / "dave.zip", "w") as archive:
        archive.writestr("dave/attention.py", CODE)
        archive.writestr("__MACOSX/._attention.py", "junk")
    (root / ".hidden").write_text("x")
    return root


def test_each_entry_is_one_submission_with_a_content_hash(tmp_path):
    found = submissions.find(_class(tmp_path))
    assert [s.student for s in found] == ["alice", "bob", "carol", "dave"]
    assert found[0].digest != found[2].digest and len(found[0].digest) == 64
    assert submissions.find(tmp_path / "class" / "bob.py")[0].student == "bob"


def test_the_hash_changes_with_the_content_only(tmp_path):
    root = _class(tmp_path)
    before = submissions.content_hash(root / "alice")
    assert submissions.content_hash(root / "alice") == before
    (root / "alice" / "attention.py").write_text(CODE + "# changed\n")
    assert submissions.content_hash(root / "alice") != before


def test_staging_copies_converts_notebooks_and_extracts_zips(tmp_path):
    staging = tmp_path / "staging"
    staging.mkdir()
    staged = {s.student: submissions.stage(s, staging) for s in submissions.find(_class(tmp_path))}
    assert [p.name for p in staged["alice"].files] == ["attention.py"]
    carol = staged["carol"]
    script = carol.files[0]
    assert script.name == "carol.py" and "#%matplotlib inline" in script.read_text()
    assert submissions.where(carol.cells["carol.py"], 4) == "cell 3, line 2"
    assert [p.relative_to(staged["dave"].folder).as_posix() for p in staged["dave"].files] == ["dave/attention.py"]
    assert not (staged["dave"].folder / "__MACOSX").exists()
    assert stat.S_IMODE(script.stat().st_mode) == 0o644


@pytest.mark.parametrize(("name", "says"), [
    ("../evil.py", "unsafe name"),
    ("/etc/evil.py", "unsafe name"),
    ("a/../../evil.py", "unsafe name"),
])
def test_a_zip_with_a_path_out_of_its_folder_is_refused(tmp_path, name, says):
    archive = tmp_path / "eve.zip"
    with zipfile.ZipFile(archive, "w") as opened:
        opened.writestr(name, CODE)
    with pytest.raises(UnreadableError, match=says):
        submissions.stage(submissions.find(archive)[0], tmp_path)
    assert not (tmp_path / "evil.py").exists()


def test_a_zip_with_a_link_or_too_much_data_is_refused(tmp_path, monkeypatch):
    archive = tmp_path / "eve.zip"
    with zipfile.ZipFile(archive, "w") as opened:
        link = zipfile.ZipInfo("link.py")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        opened.writestr(link, "/etc/passwd")
    with pytest.raises(UnreadableError, match="link or a special file"):
        submissions.stage(submissions.find(archive)[0], tmp_path)
    big = tmp_path / "big.zip"
    with zipfile.ZipFile(big, "w", compression=zipfile.ZIP_DEFLATED) as opened:
        opened.writestr("a.py", "#" * 5000)
    monkeypatch.setattr(submissions, "MAX_BYTES", 1000)
    with pytest.raises(UnreadableError, match="too large"):
        submissions.stage(submissions.find(big)[0], tmp_path)


def test_not_a_zip_or_no_python_is_a_clear_reason(tmp_path):
    (tmp_path / "broken.zip").write_bytes(b"PK not really")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hello")
    (tmp_path / "essay.docx").write_bytes(b"x")
    reasons = {}
    for found in submissions.find(tmp_path):
        staging = tmp_path / "s" / found.student
        staging.mkdir(parents=True)
        with pytest.raises(UnreadableError) as raised:
            submissions.stage(found, staging)
        reasons[found.student] = str(raised.value)
    assert reasons["broken"].startswith("cannot read the zip file")
    assert reasons["empty"] == "no Python file or notebook found in the submission"
    assert reasons["essay"].startswith("not a submission: essay.docx")


def test_a_link_or_a_fifo_in_the_class_folder_is_refused_unread(tmp_path):
    """Issue 17: an entry that is a link (to a secret, to ``/``) is neither hashed through nor
    staged (the grader would copy what it points to with its own rights); a FIFO is not opened."""
    root = tmp_path / "class"
    root.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("the grader's token")
    (root / "shadowy.py").symlink_to(secret)
    (root / "everything").symlink_to("/")
    os.mkfifo(root / "fifo.py")
    found = {s.student: s for s in submissions.find(root)}  # hashing "/" or reading the FIFO would never end
    assert sorted(found) == ["everything", "fifo", "shadowy"]
    reasons = {}
    for student, submission in found.items():
        with pytest.raises(UnreadableError) as raised:
            submissions.stage(submission, tmp_path / "staging")
        reasons[student] = str(raised.value)
    assert reasons["shadowy"] == f"a link, not a submission (to {secret}): not followed"
    assert reasons["everything"] == "a link, not a submission (to /): not followed"
    assert reasons["fifo"] == "not a file or a folder"
    assert not (tmp_path / "staging").exists()


def test_a_students_name_shows_no_control_character_and_stages_when_long(tmp_path):
    """Issue 17: a folder named with a newline, an ANSI escape, a carriage return or bytes that are
    not UTF-8 gets a name that shows as it is (escaped), never acts on a terminal or breaks a UTF-8
    writer; a 250-character name stages (its folder's name is capped) instead of failing."""
    root = tmp_path / "class"
    root.mkdir()
    hostile = b"eve\nalice  100\xe2\x81\x84100\x1b[2K\rcarol\xff"  # a name has no "/": a fraction slash
    for name in (hostile, b"x" * 250):
        os.mkdir(os.path.join(os.fsencode(root), name))
        Path(os.fsdecode(os.path.join(os.fsencode(root), name)), "attention.py").write_text(CODE)
    found = submissions.find(root)
    assert [s.student for s in found] == ["eve\\nalice  100\u2044100\\x1b[2K\\rcarol\\xff", "x" * 250]
    assert all(s.student.isprintable() and s.student.encode("utf-8") for s in found)
    staging = tmp_path / "staging"
    staging.mkdir()
    assert [submissions.stage(s, staging).files[0].name for s in found] == ["attention.py"] * 2


def test_compiled_code_is_not_staged(tmp_path):
    """Issue 17: an extension module is imported before the ``.py`` beside it, and a ``.pyc`` may
    hold other code than its source: neither is staged (from a folder or a zip), so the grade is
    about the source the grader can read."""
    root = tmp_path / "class"
    (root / "mallory").mkdir(parents=True)
    (root / "mallory" / "attention.py").write_text(CODE)
    for name in ("helper.cpython-311-x86_64-linux-gnu.so", "helper.abi3.so", "old.pyc", "native.pyd"):
        (root / "mallory" / name).write_bytes(b"\x7fELF not really")
    with zipfile.ZipFile(root / "trent.zip", "w") as archive:
        archive.writestr("attention.py", CODE)
        archive.writestr("helper.cpython-311-x86_64-linux-gnu.so", b"\x7fELF not really")
    staging = tmp_path / "staging"
    staging.mkdir()
    for found in submissions.find(root):
        staged = submissions.stage(found, staging)
        assert sorted(p.name for p in staged.folder.rglob("*") if p.is_file()) == ["attention.py"], found.student


def test_a_deeply_nested_folder_or_a_zip_that_cannot_be_extracted_costs_only_its_row(tmp_path):
    """Issue 17: listing a folder nested 1500 deep raised RecursionError (os.walk recurses, a frame
    a level) and ended the whole run before any grade; a zip holding "a" and "a/b.py" raised
    FileExistsError, a "grader error". Here 200 levels under a recursion limit 80 frames above
    this one (1500 levels would also defeat the temp folder's own cleanup, which recurses too):
    folders past MAX_DEPTH are left out, and the zip is unreadable, with its reason."""
    root = tmp_path / "class"
    deep = root / "eve"
    deep.mkdir(parents=True)
    (deep / "attention.py").write_text(CODE)
    (deep.joinpath(*["a"] * 200)).mkdir(parents=True)
    with zipfile.ZipFile(root / "zed.zip", "w") as archive:
        archive.writestr("a", "x")
        archive.writestr("a/b.py", CODE)
    staging = tmp_path / "staging"
    staging.mkdir()
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + 80)
    try:
        found = {s.student: s for s in submissions.find(root)}
        eve = submissions.stage(found["eve"], staging)
        with pytest.raises(UnreadableError, match="cannot extract the zip file: File exists"):
            submissions.stage(found["zed"], staging)
    finally:
        sys.setrecursionlimit(limit)
    assert [p.name for p in eve.files] == ["attention.py"]
