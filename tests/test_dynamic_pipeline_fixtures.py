"""Every fixture through the whole dynamic checker, in process (the dynamic twin of test_fixtures_static).

The ``dyn_*`` fixtures: correct ones pass every check, buggy ones are named by their ``# dynamic:`` codes.
Every fixture with targets:

- ``correct/``: every target passes every check, or is in LEGITIMATE_SKIPS (skipped, for the reason given);
  a ``# dynamic: none`` header marks a static-only fragment (real-world snippets kept as regressions).
- ``buggy/`` and ``seeds/`` with a ``# dynamic: CODES`` header: those codes are reported (each buggy
  fixture is named by its catalogue code, not only ATT903); ``# dynamic: none`` files are not run.

Targets come from the real static target finder, so a target that the finder reports but the
binder cannot build fails here unless its skip is listed with why.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attncheck.dynamic.runner import check_file
from attncheck.sources import Source
from attncheck.static.engine import FileResult, lint
from tests.dynamic_support import FIXTURES, Options, expected_codes, file_result, in_process_child

CORRECT = sorted((FIXTURES / "correct").glob("dyn_*.py"))
BUGGY = sorted((FIXTURES / "buggy").glob("dyn_*.py"))


@pytest.mark.parametrize("path", CORRECT, ids=lambda p: p.stem)
def test_correct_fixture_passes_every_check(path):
    findings, results = check_file(file_result(path), Options(), in_process_child)
    assert results, "the fixture has no target"
    for result in results:
        failed = [(c.name, c.detail) for c in result.checks if c.status in ("failed", "error")]
        assert result.status == "passed", (result.reason, failed)
        assert {c.name for c in result.checks} >= {
            "forward",
            "output-shape",
            "reference",
            "batch-independence",
        }
    assert findings == []


@pytest.mark.parametrize("path", BUGGY, ids=lambda p: p.stem)
def test_buggy_fixture_reports_its_codes(path):
    findings, results = check_file(file_result(path), Options(), in_process_child)
    expected = expected_codes(path)
    assert expected, "buggy fixture without a '# dynamic:' header"
    assert expected <= {f.code for f in findings}
    assert all(r.status == "failed" for r in results)
    target_lines = {r.target.line for r in results}
    for finding in findings:
        assert finding.source == "dynamic"
        assert finding.span.line in target_lines
        assert any(char.isdigit() for char in finding.message) or finding.code in ("ATT303", "ATT907")


def test_weight_mapping_is_reported_for_fused_and_conv1d_layers():
    details = {}
    for name in ("dyn_fused_qkv.py", "dyn_gpt2_conv1d.py", "dyn_hf_gqa.py"):
        _, results = check_file(file_result(FIXTURES / "correct" / name), Options(), in_process_child)
        details[name] = next(c.detail for c in results[0].checks if c.name == "reference")
    assert "QKV=qkv (fused, split 32/32/32), O=proj" in details["dyn_fused_qkv.py"]
    assert "QKV=c_attn (fused" in details["dyn_gpt2_conv1d.py"]
    assert "causal: top-left" in details["dyn_gpt2_conv1d.py"]
    assert "Q=q_proj, K=k_proj, V=v_proj, O=o_proj" in details["dyn_hf_gqa.py"]


def test_mask_convention_and_fully_masked_rows_are_described():
    _, results = check_file(
        file_result(FIXTURES / "correct" / "dyn_cross_attention.py"), Options(), in_process_child
    )
    checks = {c.name: c for c in results[0].checks}
    assert "True = masked" in checks["mask-convention"].detail
    assert "documented as bool, True = masked" in checks["mask-convention"].detail
    assert checks["fully-masked-rows"].status == "passed"
    assert checks["query-independence"].status == "passed"
    _, results = check_file(
        file_result(FIXTURES / "correct" / "dyn_sdpa_function.py"), Options(), in_process_child
    )
    checks = {c.name: c for c in results[0].checks}
    assert checks["weights-sum"].status == "passed"
    assert "0 (like SDPA)" not in checks["fully-masked-rows"].detail  # finfo.min fill gives mean(V)


def test_same_seed_gives_same_results():
    path = FIXTURES / "buggy" / "dyn_wrong_scale.py"
    first = check_file(file_result(path), Options(), in_process_child)
    second = check_file(file_result(path), Options(), in_process_child)
    assert [f.message for f in first[0]] == [f.message for f in second[0]]


_HEADER = re.compile(r"^#\s*dynamic:\s*(none|ATT\d{3}(?:\s*,\s*ATT\d{3})*)\s*$", re.M)

# Targets the checker cannot run yet, and why (add one only with its reason).
LEGITIMATE_SKIPS: dict[tuple[str, str], str] = {
    ("correct/variant_mla_latent_kv.py", "LatentAttention"): "MLA latent KV: the reference has one projection per "
    "Q/K/V; the skip must name the construct (test_an_unmodelled_variant_is_skipped_with_its_name)",
    ("correct/pool_class_token.py", "MeanQueryPool"): "pooling by the mean of the tokens: no rows of the "
    "input are the queries, which the reference does not model",
    ("correct/pool_class_token.py", "PrependedClsToken"): "a class token of its own prepended inside and "
    "attended through nn.MultiheadAttention: its queries are no rows of the input, which the reference does not model",
    ("correct/pool_class_token.py", "QueryVectorPool"): "a query vector used without a projection: the "
    "recorder sees no projection read it, so its queries are not known",
    ("buggy/lecture_heads_global_width_scale_c_att201.py", "MultiHeadAttention"): "the lecture's heads as "
    "separate Head modules, concatenated: each Head is its own target (and is checked, here ATT201), the list "
    "of them is not assembled into one reference",
    ("correct/bind_convolution_attention_forms.py", "MultiHeadConvAttention"): "NextViT's convolution named "
    "attention: it computes no attention, and says so",
    ("correct/bind_convolution_attention_forms.py", "DownsampledConvAttention"): "LowFormer's attention over "
    "tokens a strided convolution downsampled, upsampled back: not the input's own tokens",
    ("correct/linear_attention_feature_maps.py", "LinearAttention"): "linear attention (elu + 1, no softmax): "
    "the reference models softmax attention; the skip names the feature map",
    ("correct/linear_attention_feature_maps.py", "KernelAttention"): "linear attention through a feature_map "
    "module: the skip names the construct",
}

# Fixtures whose mistake no probe reaches yet. Strict: they fail the suite once fixed.
NEEDS_PROBE: dict[str, str] = {}


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
            if _header(text) is None and (folder != "correct" or _HEADER.search(text)):
                continue  # `# dynamic: none`: a static-only fragment (and buggy files need a header)
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
    for finding in findings:  # at its target, or at the line of the user's code that raised
        assert finding.source == "dynamic"
        assert finding.span.line in target_lines or f"raised at line {finding.span.line}" in finding.evidence
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
    assert expected <= reported, {"missing": sorted(expected - reported), "reported": sorted(reported)}


def test_an_unmodelled_variant_is_skipped_with_its_name():
    path = FIXTURES / "correct" / "variant_mla_latent_kv.py"
    findings, (result,) = check_file(_static(path), Options(device="cpu"), in_process_child)
    assert (result.status, findings) == ("skipped", [])
    assert "MLA latent key/value projections" in result.reason and "max error" in result.reason


def test_a_window_without_its_causal_half_is_named_by_its_leak_alone():
    """The output is a both-sided window of |i-j| < W (a reading of the declared window): the reference
    holds, and the only mistake is the future leak, not an unexplained mismatch next to it."""
    path = FIXTURES / "buggy" / "causal_leak_sliding_window.py"
    findings, (result,) = check_file(_static(path), Options(device="cpu"), in_process_child)
    assert [f.code for f in findings] == ["ATT906"]
    checks = {c.name: c for c in result.checks}
    assert checks["reference"].status == "passed" and "local window |i-j| < 3" in checks["reference"].detail


def _static_only(folder: str) -> list[object]:
    return [
        pytest.param(path, id=_name(path))
        for path in sorted((FIXTURES / folder).glob("*.py"))
        if _HEADER.search(path.read_text(encoding="utf-8")) and _header(path.read_text(encoding="utf-8")) is None
    ]


@pytest.mark.parametrize("path", _static_only("buggy"))
def test_a_static_only_buggy_fragment_gets_verdicts_not_internal_errors(path: Path):
    """`attncheck fixtures/buggy` runs the `# dynamic: none` fragments too: whatever their verdicts, none
    may be attncheck's own failure (a judge that died in an einsum was one, seen on a GPU machine)."""
    _, results = check_file(_static(path), Options(device="cpu"), in_process_child)
    assert [r.reason for r in results if r.reason.startswith("attncheck could not")] == []


@pytest.mark.parametrize("path", _static_only("correct"))
def test_a_static_only_correct_fragment_gets_no_dynamic_finding(path: Path):
    """`# dynamic: none` fragments are still correct code: `attncheck fixtures/correct` runs them, and
    each target passes or is skipped with why, never failed."""
    findings, results = check_file(_static(path), Options(device="cpu"), in_process_child)
    for result in results:  # the in-process child imports the file as it is: a missing package is an error
        missing = re.search(r"No module named '([\w.]+)'", result.reason)
        if result.status == "error" and missing:
            pytest.skip(f"needs {missing.group(1)}, which this environment lacks")
    assert [(f.code, f.message) for f in findings] == []
    assert all(r.status in ("passed", "skipped") and (r.status == "passed" or r.reason) for r in results)


def test_a_scale_mistake_behind_an_additive_mask_api_is_not_also_a_mask_mistake():
    """Nothing matches with the scale wrong; the bool mask the API adds is the harness's convention, not a
    second mistake of the module (it was ATT201 + a paired ATT301 "added-keep-mask")."""
    path = FIXTURES / "buggy" / "additive_mask_api_scale_head_dim_att201.py"
    findings, _ = check_file(_static(path), Options(device="cpu"), in_process_child)
    assert {f.code for f in findings} == {"ATT201"}


def test_a_rope_base_the_module_only_shares_rotates_nothing():
    """Dia's cross-attention reads its decoder's config (rope_theta in it) and rotates nothing: its declared
    scale of 1 fits once the reference stops rotating for it (it was skipped as an unmodelled scale)."""
    path = FIXTURES / "correct" / "cross_attention_config_rope_unrotated.py"
    findings, results = check_file(_static(path), Options(device="cpu"), in_process_child)
    assert findings == []
    assert {r.target.name: r.status for r in results}["DecoderCrossAttention"] == "passed"
