"""The softcap-engaged probe: a declared tanh soft-cap is judged on scores large enough to engage it.

A cap of 50 is nearly the identity on the plain run's scores, so the buggy fixtures here pass
the reference on tolerance (or fail it with no named mistake); only the scaled runs name them.
"""

from __future__ import annotations

from tests.dynamic_support import FIXTURES, checked_target


def test_a_cap_of_50_is_engaged_and_passes():
    findings, result, checks = checked_target(FIXTURES / "correct" / "variant_softcap_50_gemma2.py")
    assert (result.status, findings) == ("passed", [])
    check = checks["softcap-engaged"]
    assert check.status == "passed"
    assert check.detail.startswith("softcap = 50; errors of the inputs scaled x3: 0 capped")
    assert "x27: 0 capped / 7.43 uncapped" in check.detail  # the cap changes the output there


def test_a_missing_cap_is_att201():
    findings, _, checks = checked_target(FIXTURES / "buggy" / "softcap_missing_att201.py")
    assert checks["reference"].status == "passed"  # 1.2e-7 from the capped reference on the plain run
    assert [f.code for f in findings] == ["ATT201"]
    assert findings[0].message.startswith("the declared soft-cap softcap = 50 is not applied")
    assert "Fix: scores = softcap * tanh(scores / softcap)" in findings[0].message


def test_a_cap_after_the_softmax_is_att203_and_replaces_the_unexplained_mismatch():
    findings, _, checks = checked_target(FIXTURES / "buggy" / "softcap_after_softmax_att203.py")
    assert checks["reference"].status == "failed"
    assert [f.code for f in findings] == ["ATT203"]
    assert "does not act on the scores before the softmax" in findings[0].message
    assert checks["softcap-engaged"].status == "failed"


def test_a_cap_that_the_scores_never_reach_is_skipped(tmp_path):
    text = (FIXTURES / "correct" / "variant_softcap_50_gemma2.py").read_text()
    path = tmp_path / "user_attention.py"
    path.write_text(text.replace("attn_logit_softcapping: float = 50.0", "attn_logit_softcapping: float = 1e6"))
    findings, result, checks = checked_target(path)
    assert (result.status, findings) == ("passed", [])
    assert checks["softcap-engaged"].status == "skipped"
    assert checks["softcap-engaged"].detail.endswith("the scores never reach the cap")


def test_no_cap_no_check():
    _, result, checks = checked_target(FIXTURES / "correct" / "variant_sliding_window_mistral.py")
    assert result.status == "passed" and "softcap-engaged" not in checks
