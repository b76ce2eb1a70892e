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
