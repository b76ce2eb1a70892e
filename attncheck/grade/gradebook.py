"""The gradebook that survives: an SQLite file in the output folder.

Each grade is stored under the content hash of the submission and the assignment's hash, the
moment it is known (one transaction per row), so an interrupted run keeps every row it
finished and the next run grades only what is missing, new or changed; ``--rerun`` ignores
what is stored. Each run is recorded with its seed, so it can be reproduced with ``--seed``.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from attncheck.grade.record import Grade

FILE = "gradebook.sqlite"
SCHEMA = """
CREATE TABLE IF NOT EXISTS grades (
    digest TEXT NOT NULL, assignment TEXT NOT NULL, student TEXT NOT NULL,
    grade TEXT NOT NULL, graded_at REAL NOT NULL,
    PRIMARY KEY (digest, assignment, student)
);
CREATE TABLE IF NOT EXISTS runs (
    started REAL NOT NULL, assignment TEXT NOT NULL, seed INTEGER NOT NULL,
    submissions INTEGER NOT NULL, graded INTEGER NOT NULL, finished REAL
);
"""


class Gradebook:
    """Stored grades of one output folder."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.connection = sqlite3.connect(folder / FILE, timeout=30)
        self.connection.executescript(SCHEMA)

    def get(self, digest: str, assignment: str, student: str) -> Grade | None:
        row = self.connection.execute(
            "SELECT grade FROM grades WHERE digest = ? AND assignment = ? AND student = ?",
            (digest, assignment, student),
        ).fetchone()
        return Grade.from_dict(json.loads(row[0])) if row else None

    def put(self, grade: Grade, assignment: str) -> None:
        with self.connection:
            self.connection.execute(
                "INSERT OR REPLACE INTO grades VALUES (?, ?, ?, ?, ?)",
                (grade.digest, assignment, grade.student, json.dumps(grade.to_dict()), time.time()),
            )

    def start_run(self, assignment: str, seed: int, submissions: int, graded: int) -> int:
        with self.connection:
            cursor = self.connection.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?, NULL)", (time.time(), assignment, seed, submissions, graded)
            )
        return int(cursor.lastrowid or 0)

    def finish_run(self, run: int) -> None:
        with self.connection:
            self.connection.execute("UPDATE runs SET finished = ? WHERE rowid = ?", (time.time(), run))

    def close(self) -> None:
        self.connection.close()
