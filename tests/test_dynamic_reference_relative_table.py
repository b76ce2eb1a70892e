"""Swin/BEiT relative-position tables: read from the module like its weights, added in the reference.

A timm ``WindowAttention`` runs on exactly the Wh·Ww tokens of its window, so the child builds it
with a 1×L window for the probes' L tokens; the reference gathers the module's own table by its
``relative_position_index`` buffer (or by Swin's index of a declared window). The mistakes made
with such a table are each named: read transposed (ATT405), added after the softmax (ATT203), a
scale by the model width (ATT201). The index of a declared window is built by the reference (Swin's,
or BEiT's with its class token), never read from the module: one that ``__init__`` built from
key-minus-query offsets is ATT405 too, as is T5's bucket function with its halves swapped.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from attncheck.dynamic.reference import variant_fit, variants
from tests.dynamic_support import FIXTURES, checked_target

CORRECT = FIXTURES / "correct" / "variant_swin_relative_table.py"


def _fixture_module():
    spec = importlib.util.spec_from_file_location("swin_fixture", CORRECT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("window", [(1, 7), (2, 3), (3, 3)])
def test_swin_index_equals_the_one_swin_builds(window):
    assert torch.equal(variants.swin_index(window), _fixture_module().relative_position_index(window))


def test_the_gathered_bias_is_the_modules_own():
    module = _fixture_module().WindowAttention(16, 2, window_size=(2, 3)).double()
    index = module.relative_position_index
    bias = variants.relative_table_bias(module.relative_position_bias_table.detach(), index)
    assert torch.equal(bias, module._get_rel_pos_bias().detach()[0])


def _declared(tensors: dict, scalars: dict | None = None, heads: int = 2, length: int = 6) -> variant_fit.Declared:
    facts = {"scalars": scalars or {}, "tensors": list(tensors), "norms": {}, "unmodelled": []}
    out = {f"declared/{role}": value for role, value in tensors.items()}
    return variant_fit.Declared(facts, out, heads, 8, length, length)


def test_a_table_without_index_buffer_is_gathered_by_the_declared_window():
    table = torch.randn(3 * 5, 2, dtype=torch.float64)
    ((_, by_window, reversed_window),) = variant_fit.relative_biases(
        _declared({"relative_table": table}, {"window_size": [2, 3]})
    )
    ((_, by_buffer, reversed_buffer),) = variant_fit.relative_biases(
        _declared({"relative_table": table, "relative_index": variants.swin_index((2, 3))})
    )
    assert torch.equal(by_window, by_buffer) and torch.equal(reversed_window, reversed_buffer)
    assert torch.equal(reversed_window, by_window.transpose(1, 2))


def test_the_declared_window_builds_the_index_and_the_modules_own_buffer_is_not_read():
    table = torch.randn(3 * 5, 2, dtype=torch.float64)
    wrong = variants.swin_index((2, 3)).T  # built in __init__ from key-minus-query offsets
    ((_, bias, _),) = variant_fit.relative_biases(
        _declared({"relative_table": table, "relative_index": wrong}, {"window_size": [2, 3]})
    )
    assert torch.equal(bias, variants.relative_table_bias(table, variants.swin_index((2, 3))))


def test_a_beit_table_is_read_by_beits_index_and_reversed_with_its_class_token_in_place():
    module = importlib.util.module_from_spec(
        spec := importlib.util.spec_from_file_location("beit", FIXTURES / "correct" / "variant_beit_relative_table.py")
    )
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(module)
    for window in ((1, 6), (2, 3)):
        assert torch.equal(variants.beit_index(window), module.gen_relative_position_index(window))
        reversed_index = variants.beit_index(window, reversed_offsets=True)
        assert torch.equal(reversed_index[1:, 1:], variants.swin_index(window).T)
        assert torch.equal(reversed_index[0], variants.beit_index(window)[0])
    table = torch.randn(3 * 5 + 3, 2, dtype=torch.float64)
    ((_, bias, reversed_bias),) = variant_fit.relative_biases(
        _declared({"relative_table": table}, {"window_size": [2, 3]}, length=7)
    )
    assert torch.equal(bias, variants.relative_table_bias(table, variants.beit_index((2, 3))))
    assert not torch.equal(reversed_bias, bias.transpose(1, 2))  # the class token's entries are not swapped


def test_a_table_without_index_or_window_is_a_centred_1d_table_read_both_ways():
    table = torch.randn(2 * 6 - 1, 2, dtype=torch.float64)  # offsets -5..5
    readings = {name: bias for name, bias, _ in variant_fit.relative_biases(_declared({"relative_table": table}))}
    forward, backward = readings["1-D relative-position table (i - j)"], readings["1-D relative-position table (j - i)"]
    assert forward[1, 4, 2] == table[5 + 2, 1] and backward[1, 4, 2] == table[5 - 2, 1]
    assert torch.equal(forward, backward.transpose(1, 2))


@pytest.mark.parametrize(
    ("tensors", "length"),
    [
        ({"relative_table": torch.randn(15, 3)}, 6),  # a table of 3 heads for a module of 2
        ({"relative_table": torch.randn(15, 2), "relative_index": variants.swin_index((2, 3))}, 7),  # 6 tokens
        ({"relative_table": torch.randn(4, 2), "relative_index": variants.swin_index((2, 3))}, 6),  # index past it
        ({"relative_table": torch.randn(9, 2)}, 6),  # a 1-D table of offsets -4..4 for 6 tokens
        ({"relative_table": torch.randn(12, 2)}, 6),  # no centre
    ],
)
def test_a_table_that_does_not_fit_the_run_adds_no_bias(tensors, length):
    assert variant_fit.relative_biases(_declared(tensors, length=length)) == []


def test_a_correct_window_attention_passes_with_its_window_fitted_to_the_input():
    findings, result, checks = checked_target(CORRECT)
    assert (result.status, findings) == ("passed", [])
    assert "window_size=(1, 7) (its relative-position window spans the input)" in checks["forward"].detail
    assert "relative-position table" in checks["reference"].detail
    assert checks["reference-masked"].status == "passed"
    assert checks["permutation-equivariance"].status == "skipped"


def test_a_beit_attention_built_without_a_window_is_given_one_and_its_table_checked():
    findings, result, checks = checked_target(FIXTURES / "correct" / "variant_beit_relative_table.py")
    assert (result.status, findings) == ("passed", [])
    assert "window_size=(1, 6) (its relative-position window spans the input)" in checks["forward"].detail
    assert "relative-position table" in checks["reference"].detail


def test_a_learned_1d_relative_table_gathered_in_forward_passes():
    findings, result, checks = checked_target(FIXTURES / "correct" / "variant_relative_table_1d.py")
    assert (result.status, findings) == ("passed", [])
    assert "1-D relative-position table (j - i)" in checks["reference"].detail


@pytest.mark.parametrize(
    ("name", "code", "words"),
    [
        ("variant_relative_table_1d_bias_after_softmax_att203.py", "ATT203", "score-terms-after-softmax"),
        ("variant_swin_bias_transposed_att405.py", "ATT405", "position-bias-transposed"),
        ("variant_swin_bias_after_softmax_att203.py", "ATT203", "score-terms-after-softmax"),
        ("variant_swin_scale_dim_att201.py", "ATT201", "scale-1/sqrt(d_model)"),
        ("variant_swin_index_reversed_att405.py", "ATT405", "position-bias-transposed"),
        ("variant_beit_index_reversed_att405.py", "ATT405", "position-bias-transposed"),
    ],
)
def test_each_mistake_with_a_relative_table_is_named(name, code, words):
    findings, result, _ = checked_target(FIXTURES / "buggy" / name)
    assert result.status == "failed"
    assert [f.code for f in findings] == [code]
    assert words in findings[0].message
    assert "ATT903" not in {f.code for f in findings}


def test_a_window_no_argument_sets_is_skipped_with_why(tmp_path):
    text = CORRECT.read_text().replace("window_size: tuple[int, int] = (7, 7), ", "")
    text = text.replace("        self.window_size = window_size\n", "        self.window_size = window_size = (2, 2)\n")
    path = tmp_path / "fixed_window.py"
    path.write_text(text)
    findings, result, _ = checked_target(path)
    assert (result.status, findings) == ("skipped", [])
    assert "attends within a window of 4 tokens (its relative_position_index is 4x4)" in result.reason
    assert "no constructor argument (window_size, window, win_size) sets it" in result.reason
