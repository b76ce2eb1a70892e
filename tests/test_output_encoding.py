"""Reports on a stream that cannot encode every character: ASCII spellings, never a crash."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from attncheck.report.ascii_fallback import spell
from tests.test_cli import ROOT


@pytest.mark.parametrize("encoding", ["cp1252", "ascii"])
def test_a_report_on_a_narrow_stream_spells_what_it_cannot_encode(encoding):
    run = subprocess.run([sys.executable, "-m", "attncheck", "--static-only", "--no-cache",
                          "fixtures/buggy/scale_missing.py"], cwd=ROOT, capture_output=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": encoding})
    stdout = run.stdout.decode(encoding)
    assert b"UnicodeEncodeError" not in run.stderr
    assert run.returncode == 1, run.stderr
    assert "ATT201" in stdout
    assert "k^T reach the softmax" in stdout
    if encoding == "ascii":
        assert "q.k^T" in stdout
    else:
        assert "q·k^T" in stdout  # cp1252 has the middle dot: only what it lacks is respelled


def test_spellings():
    assert [spell(c) for c in "·ᵀθ…"] == [".", "^T", "theta", "..."]
    assert spell("é") == "e"
    assert spell("屏") == "?"
