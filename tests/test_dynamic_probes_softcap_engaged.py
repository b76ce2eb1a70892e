"""The softcap-engaged probe: a declared tanh soft-cap is judged on scores large enough to engage it.

A cap of 50 is nearly the identity on the plain run's scores, so before this probe the buggy
fixtures here passed the reference on tolerance (or failed it with no named mistake). A class built
from a config now gets a cap of 5 from the binding, which the plain run may already miss; the
scaled runs name the mistake either way.
"""

from __future__ import annotations

from tests.dynamic_support import FIXTURES, checked_target


def test_a_cap_of_50_is_engaged_and_passes():
    findings, result, checks = checked_target(FIXTURES / "correct" / "variant_softcap_50_gemma2.py")
    assert (result.status, findings) == ("passed", [])
    check = checks["softcap-engaged"]
    assert check.status == "passed"
    assert check.detail.startswith("softcap = 5; errors of the inputs scaled x3: 0 capped")  # the binding's cap
    assert "x27: 0 capped / 17.3 uncapped" in check.detail  # the cap changes the output there (seed 0 weights)


def test_a_missing_cap_is_att201():
    findings, _, checks = checked_target(FIXTURES / "buggy" / "softcap_missing_att201.py")
    assert [f.code for f in findings] == ["ATT201"]
    assert checks["softcap-engaged"].status == "failed"
    assert findings[0].message.startswith("the declared soft-cap softcap = 5 is not applied")
    assert "Fix: scores = softcap * tanh(scores / softcap)" in findings[0].message


def test_a_cap_after_the_softmax_is_att203_and_replaces_the_unexplained_mismatch():
    findings, _, checks = checked_target(FIXTURES / "buggy" / "softcap_after_softmax_att203.py")
    assert checks["reference"].status == "failed"
    assert [f.code for f in findings] == ["ATT203"]
    assert "does not act on the scores before the softmax" in findings[0].message
    assert checks["softcap-engaged"].status == "failed"


def test_a_cap_that_the_scores_never_reach_is_skipped(tmp_path):
    # a cap fixed in the code, which the binding cannot set smaller
    text = (FIXTURES / "correct" / "variant_softcap_50_gemma2.py").read_text()
    text = text.replace("    attn_logit_softcapping: float = 50.0\n", "")
    path = tmp_path / "user_attention.py"
    path.write_text(text.replace("self.softcap = config.attn_logit_softcapping", "self.softcap = 1e6"))
    findings, result, checks = checked_target(path)
    assert (result.status, findings) == ("passed", [])
    assert checks["softcap-engaged"].status == "skipped"
    assert checks["softcap-engaged"].detail.endswith("the scores never reach the cap")


def test_no_cap_no_check():
    _, result, checks = checked_target(FIXTURES / "correct" / "variant_sliding_window_mistral.py")
    assert result.status == "passed" and "softcap-engaged" not in checks
