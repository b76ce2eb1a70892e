"""The rule registry: the issue-2 rules are registered, and loading every rule imports no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from attncheck.static.rules import all_rules

ROOT = Path(__file__).resolve().parents[2]


def test_static_rules_never_import_torch():
    code = (
        "import sys\nfrom attncheck.static.rules import all_rules\nall_rules()\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_every_issue2_rule_is_registered():
    assert {"ATT101", "ATT102", "ATT103", "ATT201", "ATT202", "ATT204", "ATT301"} <= {
        r.code for r in all_rules()
    }
