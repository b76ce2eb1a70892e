"""``attncheck grade`` on the command line: bad input in one line (exit 2), one candidate in seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from attncheck.cli import main

CLASS = Path(__file__).resolve().parents[2] / "fixtures" / "grading" / "class"


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ended:
        main(argv)
    captured = capsys.readouterr()
    return ended.value.code, captured.out, captured.err


def test_a_missing_folder_or_a_bad_assignment_is_one_line_and_exit_2(tmp_path, capsys):
    code, _, err = _run(["grade", str(tmp_path / "nowhere")], capsys)
    assert code == 2 and "does not exist" in err and "Traceback" not in err
    bad = tmp_path / "a.toml"
    bad.write_text("[assignment]\nvariant = 'sparse'\n")
    code, _, err = _run(["grade", str(CLASS / "s01"), "--assignment", str(bad), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "assignment.variant must be one of" in err and "Traceback" not in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = _run(["grade", str(empty), "--out", str(empty / "grades")], capsys)
    assert code == 2 and "no submissions in" in err  # the output folder inside is not a student
    blocked = tmp_path / "file"
    blocked.write_text("x")
    code, _, err = _run(["grade", str(CLASS / "s01"), "--out", str(blocked / "out")], capsys)
    assert code == 2 and err.startswith("Error: --out: cannot write") and "Traceback" not in err


@pytest.mark.sandbox
@pytest.mark.slow
def test_one_candidate_file_prints_its_row_and_writes_the_outputs(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "out"
    code, text, _ = _run(["grade", str(CLASS / "s05" / "attention.py"), "--out", str(out), "--seed", "3"], capsys)
    assert code == 0
    assert "attention" in text and "78/100" in text and "ATT201" in text
    assert sorted(p.name for p in out.iterdir()) == ["feedback", "gradebook.csv", "gradebook.sqlite",
                                                      "gradescope", "report.html"]
    assert "seed 3" in (out / "report.html").read_text()


def test_a_students_chosen_text_is_no_markup_in_the_table_and_no_formula_in_the_csv(tmp_path, capsys):
    """Issue 17: a name or a file name a student chose is shown as written: rich markup in it
    (``[bold green]``) is not applied, control characters are escaped, and a cell of
    gradebook.csv that starts like a formula (``=HYPERLINK(...)``) is not one."""
    import csv

    from attncheck.grade import csv_export
    from attncheck.grade.command import _print_table
    from attncheck.grade.record import Grade

    grades = [Grade("[bold green]dan[x]", "d1", "graded", score=78, maximum=100),
              Grade('=HYPERLINK("http://evil","y")', "d2", "could not be read", maximum=100,
                    problem="could not be read: [red]a\x1b[2K.py, line 1: syntax error")]
    _print_table(grades, 1.0, tmp_path)
    text = capsys.readouterr().out
    assert "[bold green]dan[x]" in text and "[red]a\\x1b[2K.py" in text and "\x1b" not in text
    csv_export.write(tmp_path / "gradebook.csv", grades, [])
    with (tmp_path / "gradebook.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert [row[0] for row in rows[1:]] == ["[bold green]dan[x]", '\'=HYPERLINK("http://evil","y")']


def test_every_student_gets_a_feedback_file_of_its_own(tmp_path):
    """Issue 17: names that became the same file name ("a b" and "a_b"; "Bob" and "bob" where
    case is ignored) overwrote each other's feedback, and 100 CJK letters (300 bytes, over a file
    name's 255) ended the writing of every output after the CSV."""
    from attncheck.grade import outputs
    from attncheck.grade.assignment import Assignment
    from attncheck.grade.record import Grade

    students = ["a b", "a_b", "中" * 100, "Bob", "bob", "a_b-2"]
    grades = [Grade(name, f"d{i}", "could not be read", maximum=100, problem="x") for i, name in enumerate(students)]
    outputs.write_all(tmp_path, grades, Assignment(), 7)
    written = sorted((tmp_path / "feedback").iterdir())
    assert len(written) == len(students) and all(len(path.name.encode()) <= 255 for path in written)
    assert len(list((tmp_path / "gradescope").iterdir())) == len(students) and (tmp_path / "report.html").is_file()
    texts = {path.read_text(encoding="utf-8").splitlines()[0] for path in written}
    assert len(texts) == len(students)  # each file is its own student's
