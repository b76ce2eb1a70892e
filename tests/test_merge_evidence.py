"""Merge by evidence (issue 16, item 7): a static finding is downgraded only when the dynamic check
could see that mistake on the inputs it used, and did not. One test per static code at the merge,
and one per code of what the dynamic evidence says about real modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from attncheck.catalogue import CODES
from attncheck.dynamic.runner import check_file
from attncheck.findings import Check, Finding, Severity, Span, Target, TargetResult
from attncheck.merge import REFUTED_REASON, UNSEEN_NOTE, merge
from attncheck.sources import Source
from attncheck.static.engine import lint
from tests.dynamic_support import FIXTURES, Options, in_process_child

STATIC_CODES = [code for code in CODES if not code.startswith("ATT9")]


def _target(name: str = "Attn") -> Target:
    return Target(path="model.py", name=name, line=3, kinds=("mha",), is_class=True)


def _static(code: str, target: str = "Attn") -> Finding:
    return Finding(code, CODES[code].severity, f"static {code}", "model.py", Span(5), target=target)


def _passed(refuted: dict[str, str]) -> TargetResult:
    return TargetResult(_target(), "passed", checks=[Check("reference", "passed")], refuted=refuted)


@pytest.mark.parametrize("code", STATIC_CODES)
def test_passing_check_without_evidence_keeps_the_severity(code: str) -> None:
    (finding,) = merge([_static(code)], [], [_passed({})])
    assert finding.severity == CODES[code].severity
    assert finding.message == f"static {code}"
    assert finding.evidence == [UNSEEN_NOTE]


@pytest.mark.parametrize("code", STATIC_CODES)
def test_passing_check_that_could_see_the_mistake_downgrades_it(code: str) -> None:
    (finding,) = merge([_static(code)], [], [_passed({code: "the probe of it held"})])
    assert finding.severity == Severity.INFO
    assert finding.message == f"static {code} ({REFUTED_REASON})"
    assert finding.evidence == ["dynamic: the probe of it held"]


@pytest.mark.parametrize("code", STATIC_CODES)
def test_evidence_for_another_code_downgrades_nothing(code: str) -> None:
    other = next(c for c in STATIC_CODES if c != code)
    (finding,) = merge([_static(code)], [], [_passed({other: "seen"})])
    assert finding.severity == CODES[code].severity


def test_failed_target_keeps_the_severity_and_records_the_evidence() -> None:
    failed = TargetResult(_target(), "failed", refuted={"ATT201": "seen"})
    (finding,) = merge([_static("ATT201")], [], [failed])
    assert finding.severity == Severity.ERROR
    assert finding.evidence == ["dynamic: seen"]


@pytest.mark.parametrize("status", ["skipped", "error"])
def test_target_that_did_not_run_leaves_the_finding_alone(status: str) -> None:
    (finding,) = merge([_static("ATT201")], [], [TargetResult(_target(), status, "why")])
    assert finding == _static("ATT201")


# --- what the dynamic check could see on real modules --------------------------------------


def _refuted(path: Path, codes: list[str]) -> dict[str, dict[str, str]]:
    """Each target's refuted codes after a dynamic run, as if the static pass had found ``codes``."""
    result = lint(Source(str(path), path.read_text(encoding="utf-8")), ())
    result.findings = [
        Finding(c, Severity.ERROR, "", str(path), Span(t.line), target=t.name) for t in result.targets for c in codes
    ]
    _, results = check_file(result, Options(device="cpu"), in_process_child)
    assert all(r.status in ("passed", "failed") for r in results), [(r.status, r.reason) for r in results]
    return {r.target.name: r.refuted for r in results}


# A correct multi-head module with a 0/1 mask and one attention dropout, no docstring convention,
# not causal, no GQA and no rotary embedding: which mistakes its experiments could show.
SEEN_ON_PLAIN_MASKED_MHA = {
    "ATT101": True, "ATT102": True, "ATT103": True, "ATT104": True, "ATT105": True,
    "ATT106": False,  # a crash where the line runs: the check cannot tell that the line ran
    "ATT201": True, "ATT202": True, "ATT203": True,
    "ATT204": False,  # likewise a crash
    "ATT205": False,  # no experiment of the dynamic check stands for it yet (issue 20's new code)
    "ATT206": False,  # likewise (issue 20's new code)
    "ATT301": True, "ATT302": True, "ATT303": True,
    "ATT304": False,  # no documented convention: the probes accept whichever matches
    "ATT305": False,  # not causal
    "ATT306": False,  # no (b * h) mask tiling to probe (issue 20's new code)
    "ATT401": False,  # as many KV heads as query heads
    "ATT402": False, "ATT403": False, "ATT404": False,  # no rotary embedding
    "ATT405": False,  # no relative-position bias
}


def test_every_static_code_has_an_expectation() -> None:
    assert sorted(SEEN_ON_PLAIN_MASKED_MHA) == STATIC_CODES


@pytest.fixture(scope="module")
def plain_masked_mha() -> dict[str, str]:
    (refuted,) = _refuted(FIXTURES / "loading" / "stdin" / "mymodel.py", STATIC_CODES).values()
    return refuted


@pytest.mark.parametrize("code", STATIC_CODES)
def test_evidence_per_code_on_a_correct_masked_module(code: str, plain_masked_mha: dict[str, str]) -> None:
    assert (code in plain_masked_mha) == SEEN_ON_PLAIN_MASKED_MHA[code], plain_masked_mha.get(code)


def test_evidence_names_how_the_mistake_would_have_shown() -> None:
    refuted = _refuted(FIXTURES / "loading" / "stdin" / "mymodel.py", ["ATT201"])["MultiHeadSelfAttention"]
    assert "each form of this mistake (8) would move the output by at least" in refuted["ATT201"]


def test_module_without_projections_cannot_refute_att101() -> None:
    refuted = _refuted(FIXTURES / "buggy" / "merge_att101_no_projection.py", ["ATT101", "ATT102"])
    assert refuted == {"NoProjectionAttention": {"ATT102": refuted["NoProjectionAttention"]["ATT102"]}}


def test_discarded_attention_dropout_beside_an_active_one_is_not_refuted() -> None:
    refuted = _refuted(FIXTURES / "buggy" / "merge_att103_other_dropout_active.py", ["ATT103"])
    assert refuted == {"DiscardedAttentionDropout": {}}


def test_mask_against_an_undocumented_reading_is_not_refuted() -> None:
    refuted = _refuted(FIXTURES / "buggy" / "mask_polarity_comment.py", ["ATT304"])
    assert refuted == {"MultiHeadAttention": {}}


def test_mask_probed_in_the_documented_convention_refutes_att304() -> None:
    refuted = _refuted(FIXTURES / "correct" / "mask_padding_mha.py", ["ATT304"])["MultiHeadAttention"]
    assert "documented as" in refuted["ATT304"]


def test_grouped_query_module_refutes_tiled_kv_heads() -> None:
    refuted = _refuted(FIXTURES / "correct" / "gqa_repeat_kv.py", ["ATT401"])
    assert set(refuted["LlamaStyleAttention"]) == {"ATT401"}


def _by_design(code: str) -> Finding:
    return Finding(code, Severity.WARNING, f"static {code}", "model.py", Span(5), target="Attn", by_design=True)


def test_a_dynamic_error_confirming_a_dropout_skipped_on_one_branch_keeps_the_warning() -> None:
    dynamic = Finding("ATT103", Severity.ERROR, "never takes effect", "model.py", Span(3), source="dynamic",
                      target="Attn")
    failed = TargetResult(_target(), "failed", checks=[Check("dropout-active", "failed")])
    (finding,) = merge([_by_design("ATT103")], [dynamic], [failed])
    assert (finding.severity, finding.source) == (Severity.WARNING, "both")


def test_a_passing_run_confirms_only_a_design_the_reference_runs() -> None:
    (scale,) = merge([_by_design("ATT201")], [], [_passed({})])
    assert scale.severity == Severity.INFO  # the reference ran the declared unit scale and matched
    (dropout,) = merge([_by_design("ATT103")], [], [_passed({})])
    assert dropout.severity == Severity.WARNING  # the run took the branch that applies the dropout
    assert dropout.evidence == [UNSEEN_NOTE]
