"""Every fixture with targets, checked dynamically (in process): the dynamic twin of test_fixtures_static.

- ``correct/``: every target passes every check, or is in LEGITIMATE_SKIPS (skipped, for the reason given).
- ``buggy/`` and ``seeds/`` with a ``# dynamic: CODES`` header: those codes are reported, nothing more is
  demanded; ``# dynamic: none`` files are not run.

Targets come from the real static target finder, so a target that the finder reports but the
binder cannot build fails here unless its skip is listed with why.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attncheck.dynamic.runner import check_file
from attncheck.findings import Severity
from attncheck.sources import Source
from attncheck.static.engine import FileResult, lint
from tests.dynamic_support import FIXTURES, Options, in_process_child

_HEADER = re.compile(r"^#\s*dynamic:\s*(none|ATT\d{3}(?:\s*,\s*ATT\d{3})*)\s*$", re.M)

ROPE_HELPER = "a RoPE helper on (q, k, cos, sin): it rotates, it does not attend, so it has no reference"
LEGITIMATE_SKIPS: dict[tuple[str, str], str] = {
    ("correct/rope_apply_function.py", "apply_rotary_pos_emb"): ROPE_HELPER,
    ("correct/rope_gptj.py", "apply_rotary_pos_emb"): ROPE_HELPER,
    ("correct/rope_hf.py", "apply_rotary_pos_emb"): ROPE_HELPER,
    ("correct/rope_meta.py", "apply_rotary_emb"): ROPE_HELPER,
    ("buggy/rope_d_model.py", "apply_rotary_pos_emb"): ROPE_HELPER,
    ("buggy/rope_gptj_cat.py", "apply_rotary_pos_emb"): ROPE_HELPER,
    ("buggy/rope_half_width.py", "apply_rotary_pos_emb"): ROPE_HELPER,
    ("buggy/rope_inv_freq.py", "apply_rotary_pos_emb"): ROPE_HELPER,
    ("buggy/rope_layout_mismatch.py", "apply_rotary_pos_emb"): ROPE_HELPER,
    ("buggy/rope_minus.py", "apply_rotary_pos_emb"): ROPE_HELPER,
    ("buggy/rope_on_value.py", "apply_rotary_pos_emb"): ROPE_HELPER,
    ("buggy/rope_seed004_slice.py", "apply_rotary_pos_emb"): ROPE_HELPER,
    ("buggy/rope_sign_flip.py", "apply_rotary_pos_emb"): ROPE_HELPER,
    ("buggy/rope_value_helper.py", "apply_rotary"): ROPE_HELPER,
    ("seeds/seed004_attention.py", "apply_rotary_pos_emb"): ROPE_HELPER,
}

# Codes that only the mutant diagnosis names (issue 4: it tells ATT201 from ATT104 when the output
# differs from the reference). Until it is wired into the runner, a fixture listing one of these must
# at least fail a dynamic check; remove a code here once the runner reports it.
PENDING_DIAGNOSIS = frozenset(
    {"ATT101", "ATT102", "ATT104", "ATT105", "ATT201", "ATT202", "ATT203", "ATT301", "ATT302", "ATT305"}
    | {"ATT401", "ATT402", "ATT404"}
)

# Fixtures whose mistake the float64 checks cannot see yet: each needs a probe of issue 4 (RoPE
# reference, GQA head dependency on the cache path, float16 run). Strict: they fail the suite once fixed.
NEEDS_PROBE: dict[str, str] = {
    "correct/rope_gptj.py": "the reference has no RoPE yet: rotary classes differ from plain MHA",
    "correct/rope_hf.py": "the reference has no RoPE yet: rotary classes differ from plain MHA",
    "correct/rope_meta.py": "the reference has no RoPE yet: rotary classes differ from plain MHA",
    "correct/rope_partial.py": "the reference has no RoPE yet: rotary classes differ from plain MHA",
    "buggy/gqa_mixed.py": "tiling shows only on the KV-cache path, which no probe calls yet",
    "buggy/mask_fill_overflow.py": "-1e9 overflows only in float16: needs the low-precision run",
}


def _name(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _header(text: str) -> set[str] | None:
    """The codes of ``# dynamic:``; None for ``none`` or no header."""
    match = _HEADER.search(text)
    if match is None or match.group(1) == "none":
        return None
    return {code.strip() for code in match.group(1).split(",")}


_TARGETS: dict[Path, FileResult] = {}


def _static(path: Path) -> FileResult:
    """The file's targets as the static pass finds them (no rules: the static harness runs those)."""
    if path not in _TARGETS:
        result = lint(Source(str(path), path.read_text(encoding="utf-8")), ())
        assert result.error is None, result.error
        _TARGETS[path] = result
    return _TARGETS[path]


def _collect() -> list[object]:
    params = []
    for folder in ("correct", "buggy", "seeds"):
        for path in sorted((FIXTURES / folder).glob("*.py")):
            text = path.read_text(encoding="utf-8")
            if folder != "correct" and _header(text) is None:
                continue
            if not _static(path).targets:
                continue
            reason = NEEDS_PROBE.get(_name(path))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            params.append(pytest.param(path, id=_name(path), marks=marks))
    return params


FIXTURE_FILES = _collect()


def test_the_harness_covers_every_folder_and_style():
    names = {param.id for param in FIXTURE_FILES}
    assert {name.split("/")[0] for name in names} == {"correct", "buggy", "seeds"}
    # cross-attention, causal, bare-function, config-object and GQA styles are all among them
    assert {"correct/dyn_cross_attention.py", "correct/causal_gpt.py", "correct/dyn_sdpa_function.py"} <= names
    assert {"correct/dyn_gpt2_conv1d.py", "correct/gqa_seed004.py", "seeds/seed004_attention.py"} <= names
    assert all(key[0] in names for key in LEGITIMATE_SKIPS)


def test_header_reading():
    assert _header("x\n# dynamic: ATT201, ATT903\n") == {"ATT201", "ATT903"}
    assert _header("# dynamic: none\n") is None
    assert _header("no header\n") is None


@pytest.mark.parametrize("path", FIXTURE_FILES)
def test_fixture_dynamic_behaviour(path: Path):
    name = _name(path)
    result = _static(path)
    findings, results = check_file(result, Options(device="cpu"), in_process_child)
    assert [r.target.name for r in results] == [t.name for t in result.targets]
    for target_result in results:
        key = (name, target_result.target.name)
        if target_result.status == "skipped":
            assert key in LEGITIMATE_SKIPS, f"{key} skipped: {target_result.reason}"
            assert target_result.reason, "a skip always says why"
        else:
            assert key not in LEGITIMATE_SKIPS, f"{key} now runs: drop it from LEGITIMATE_SKIPS"
        assert target_result.status != "error", target_result.reason
    target_lines = {r.target.line for r in results}
    assert all(f.source == "dynamic" and f.span.line in target_lines for f in findings)
    if path.parent.name == "correct":
        for target_result in results:
            if target_result.status == "skipped":
                continue
            failed = [
                (c.name, c.detail) for c in target_result.checks if c.status != "passed" and c.status != "skipped"
            ]
            assert target_result.status == "passed", (target_result.target.name, failed)
        assert findings == [], [(f.code, f.message) for f in findings]
        return
    expected = _header(path.read_text(encoding="utf-8"))
    assert expected is not None
    reported = {f.code for f in findings}
    missing = expected - reported
    pending = missing & PENDING_DIAGNOSIS
    assert missing == pending, {"missing": sorted(missing - pending), "reported": sorted(reported)}
    if pending:
        assert any(f.severity >= Severity.WARNING for f in findings), f"{sorted(pending)}: no check failed"
