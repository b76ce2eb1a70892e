"""``--fix`` and ``--diff`` for ATT106, ATT201, ATT202, ATT204 and ATT302.

Every fix is checked the same way: the exact text it produces (so formatting
elsewhere is byte-identical), that the result parses, and that re-linting it
finds no more of the fixed code.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import libcst as cst
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attncheck.catalogue import doc
from attncheck.findings import Finding
from attncheck.fix_conflicts import withhold
from attncheck.fixes import fix_source
from attncheck.sources import Source
from tests.conftest import lint_text
from tests.test_cli import invoke, write_notebook

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

HEADS = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


def attend(x, wq, wk, h):
    b, s, d = x.shape
    q = (x @ wq).view(b, s, h, d // h).transpose(1, 2)
    k = (x @ wk).view(b, s, h, d // h).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / (d // h) ** 0.5
    return {line}
"""

MHA = """\
import math
import torch
import torch.nn as nn


class MHA(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.head_dim = d_model // num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        s = {line}
        return torch.softmax(s, dim=-1) @ v
"""

FUNCTION = """\
import torch


def attend(q, k, v, d_k):
    scores = {line}
    return torch.softmax(scores, dim=-1) @ v
"""


def fixed_text(text: str, code: str | None = None, findings: list[Finding] | None = None) -> tuple[str, list[Finding]]:
    """``text`` with the offered fixes (of ``code``, or all) applied as ``--fix`` would, and the findings fixed."""
    findings = [f for f in (findings if findings is not None else lint_text(text)) if code is None or f.code == code]
    fixed = fix_source(Source("example.py", text), findings)
    return (fixed.text, list(fixed.fixed)) if fixed else (text, [])


def codes(text: str) -> Counter[str]:
    return Counter(f.code for f in lint_text(text))


# (code, template, buggy line, fixed line, whether ``import math`` is added after ``import torch``)
CASES = [
    ("ATT202", HEADS, "F.softmax(scores, dim=-2)", "F.softmax(scores, dim=-1)", False),
    ("ATT202", HEADS, "F.softmax(scores, dim = 2)", "F.softmax(scores, dim = -1)", False),
    ("ATT202", HEADS, "torch.softmax(scores, 1)", "torch.softmax(scores, dim=-1)", False),
    ("ATT202", HEADS, "scores.softmax(1)", "scores.softmax(dim=-1)", False),
    ("ATT202", HEADS, "F.softmax(scores)", "F.softmax(scores, dim=-1)", False),
    ("ATT202", HEADS, "scores.softmax()", "scores.softmax(dim=-1)", False),
    ("ATT202", HEADS, "torch.softmax(scores, dim=(2, 3))", "torch.softmax(scores, dim=-1)", False),
    ("ATT202", HEADS, "nn.Softmax(dim=2)(scores)", "nn.Softmax(dim=-1)(scores)", False),
    ("ATT202", HEADS, "nn.Softmax()(scores)", "nn.Softmax(dim=-1)(scores)", False),
    (
        "ATT202",
        HEADS,
        "F.softmax(scores, 1, dtype=torch.float32)",
        "F.softmax(scores, dim=-1, dtype=torch.float32)",
        False,
    ),
    (
        "ATT202",
        HEADS,
        "F.softmax(\n        scores,\n    )  # keep",
        "F.softmax(\n        scores, dim=-1,\n    )  # keep",
        False,
    ),
    ("ATT204", FUNCTION, "q @ k.transpose(-2, -1) / torch.sqrt(d_k)", "q @ k.transpose(-2, -1) / math.sqrt(d_k)", True),
    (
        "ATT204",
        FUNCTION,
        "q @ k.transpose(-2, -1) / torch.sqrt( 64 )",
        "q @ k.transpose(-2, -1) / math.sqrt( 64 )",
        True,
    ),
    (
        "ATT201",
        MHA,
        "q @ k.transpose(-2, -1) / math.sqrt(T)",
        "q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)",
        False,
    ),
    (
        "ATT201",
        MHA,
        "torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(C)",
        "torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)",
        False,
    ),
    (
        "ATT201",
        MHA,
        "q @ k.transpose(-2, -1) * math.sqrt(self.head_dim)",
        "q @ k.transpose(-2, -1) * self.head_dim ** -0.5",
        False,
    ),
    ("ATT201", MHA, "q @ k.transpose(-2, -1) * C ** -0.5", "q @ k.transpose(-2, -1) * self.head_dim ** -0.5", False),
    (
        "ATT201",
        MHA,
        "torch.einsum('bhqd,bhkd->bhqk', q, k)",
        "torch.einsum('bhqd,bhkd->bhqk', q, k) / math.sqrt(self.head_dim)",
        False,
    ),
    (
        "ATT201",
        MHA,
        "(q @ k.transpose(-2, -1)).float()",
        "(q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)).float()",
        False,
    ),
    (
        "ATT201",
        MHA,
        "torch.matmul(q, k.transpose(-2, -1)).float()",
        "(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)).float()",
        False,
    ),
    (
        "ATT201",
        FUNCTION,
        "torch.matmul(q, k.transpose(-2, -1)) / d_k",
        "torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)",
        True,
    ),
    (
        "ATT201",
        FUNCTION,
        "torch.matmul(q, k.transpose(-2, -1))",
        "torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)",
        True,
    ),
    (
        "ATT302",
        FUNCTION,
        "(q @ k.transpose(-2, -1) / d_k ** 0.5).masked_fill(v == 0, -1e9)",
        "(q @ k.transpose(-2, -1) / d_k ** 0.5).masked_fill(v == 0, -1e9)",
        False,
    ),
    ("ATT106", FUNCTION, "q.transpose(1, 2).view(2, 3, -1) @ k", "q.transpose(1, 2).reshape(2, 3, -1) @ k", False),
]


@pytest.mark.parametrize(
    ("code", "template", "before", "after", "imports"), CASES, ids=[f"{c[0]}-{c[2][:40]}" for c in CASES]
)
def test_fix_gives_exact_text_that_parses_and_relints_clean(code, template, before, after, imports):
    text = template.replace("{line}", before)
    findings = lint_text(text)
    assert code in {f.code for f in findings}, "the case must have the mistake"
    fixed, done = fixed_text(text, code, findings)
    expected = template.replace("{line}", after)
    if imports:
        expected = expected.replace("import torch\n", "import torch\nimport math\n", 1)
    if before == after:  # an unfixable spelling: nothing offered
        assert code not in {f.code for f in done}
        return
    assert fixed == expected
    assert code in {f.code for f in done}
    cst.parse_module(fixed)
    assert code not in codes(fixed)


def test_fill_value_fix_names_the_filled_tensor_and_adds_torch_when_unbound():
    text = "import torch.nn as nn\n\n\ndef f(scores, mask):\n    return scores.masked_fill(mask == 0, -1e9)\n"
    fixed, _ = fixed_text(text)
    assert fixed == (
        "import torch.nn as nn\nimport torch\n\n\ndef f(scores, mask):\n"
        "    return scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)\n"
    )
    aliased = "import torch as th\nscores = scores.masked_fill(mask, 1e4)\n"
    assert (
        fixed_text(aliased)[0] == "import torch as th\nscores = scores.masked_fill(mask, th.finfo(scores.dtype).min)\n"
    )


@pytest.mark.parametrize(
    ("header", "name", "added"),
    [
        ("import math\nimport torch\n", "math", ""),
        ("import torch\nimport math as m\n", "m", ""),
        ('"""A module."""\n', "math", "import math\n"),
        ("#!/usr/bin/env python\nfrom torch import sqrt as sq\n", "math", "import math\n"),
    ],
)
def test_sqrt_fix_uses_the_files_math_or_adds_one_import(header, name, added):
    call = "sq" if "sq\n" in header else "torch.sqrt"
    body = f"\n\ndef f(q, k):\n    d = q.size(-1)\n    a = q @ k / {call}(d)\n    return a / {call}(64)\n"
    fixed, done = fixed_text(header + body)
    assert len(done) == 2  # both findings fixed, sharing one added import
    assert fixed == header + added + body.replace(f"{call}(", f"{name}.sqrt(")
    assert "ATT204" not in codes(fixed)


def test_sqrt_fix_leaves_a_file_whose_math_is_another_module():
    text = "import numpy.ma as math\nimport torch\nx = torch.sqrt(64)\n"
    assert "ATT204" in codes(text)
    assert fixed_text(text)[0] == text


@pytest.mark.parametrize(
    "line",
    [
        "q @ k.transpose(-2, -1) / math.sqrt(T)",  # seq_len
        "torch.einsum('bqd,bkd->bqk', q, k)",  # unscaled
    ],
)
def test_no_scale_fix_without_a_head_dim_in_scope(line):
    text = (
        "import math\nimport torch\n\n\ndef attend(q, k, v):\n    B, T, C = q.shape\n"
        f"    s = {line}\n    return torch.softmax(s, dim=-1) @ v\n"
    )
    found = [f for f in lint_text(text) if f.code == "ATT201"]
    assert found and all(f.fix == () for f in found)


def test_documented_t5_attention_gets_no_fix():
    text = (FIXTURES / "buggy" / "t5_unscaled_documented.py").read_text()
    found = [f for f in lint_text(text) if f.code == "ATT201"]
    assert found and all(f.fix == () for f in found)


@pytest.mark.parametrize(("scores", "offered"), [
    ("q @ k.transpose(-2, -1) / math.sqrt(d_k)", True),
    ("(q @ k.transpose(-2, -1)).div(math.sqrt(d_k))", False),  # not an ``x / v`` on the scores
])
def test_scale_applied_twice_drops_the_divisor_on_the_scores(scores, offered):
    text = ("import math\nimport torch\n\n\ndef attend(q, k, v, d_k):\n    q = q / math.sqrt(d_k)\n"
            f"    scores = {scores}  # note\n    return torch.softmax(scores, dim=-1) @ v\n")
    fixed, done = fixed_text(text, "ATT201")
    assert bool(done) == offered
    if offered:
        assert fixed == text.replace(" / math.sqrt(d_k)  # note", "  # note")
        assert "ATT201" not in codes(fixed)


def test_head_dim_written_after_the_scores_is_not_used():
    text = (
        "import torch\n\n\ndef attend(q, k, v):\n    s = q @ k.transpose(-2, -1)\n"
        "    head_dim = q.size(-1)\n    return torch.softmax(s, dim=-1) @ v\n"
    )
    found = [f for f in lint_text(text) if f.code == "ATT201"]
    assert found and found[0].fix == ()


def test_softmax_module_is_fixed_where_it_is_built_once_for_all_its_calls():
    text = (FIXTURES / "buggy" / "softmax_wrong_dims.py").read_text()
    fixed, done = fixed_text(text)
    assert sorted(f.line for f in done if f.code == "ATT202") == [30, 31, 32, 39]
    assert "self.softmax = nn.Softmax(dim=-1)" in fixed
    assert "c = self.softmax(scores)  # expect: ATT202" in fixed  # the call is left alone
    assert "ATT202" not in codes(fixed)


def test_fix_in_a_large_file_lands_on_the_right_lines():
    padding = "".join(f"def helper_{i}(x):\n    return x + {i}\n\n\n" for i in range(150))
    text = HEADS.replace("{line}", "F.softmax(scores, dim=-2)  # end").replace(
        "import torch.nn.functional as F\n", "import torch.nn.functional as F\n\n\n" + padding
    )
    assert text.count("\n") > 400  # parsed only in its attention regions
    fixed, done = fixed_text(text)
    assert [f.code for f in done] == ["ATT202"]
    assert fixed == text.replace("dim=-2)  # end", "dim=-1)  # end")


def test_crlf_files_keep_their_line_endings():
    text = FUNCTION.replace("{line}", "q @ k.transpose(-2, -1) / torch.sqrt(d_k)").replace("\n", "\r\n")
    fixed, _ = fixed_text(text)
    assert fixed == text.replace("import torch\r\n", "import torch\r\nimport math\r\n").replace(
        "torch.sqrt", "math.sqrt"
    )


# -- through the command line --------------------------------------------------------

MIXED = """\
import torch
import torch.nn.functional as F


def attend(q, k, v, d_k, mask):
    scores = q @ k.transpose(-2, -1) / torch.sqrt(d_k)   # two spaces before this comment
    scores = scores.masked_fill(mask == 0, -1e9)
    w = F.softmax(scores, dim=-2)
    out = (w @ v).transpose(1, 2)
    return out.view(out.size(0), -1)
"""

MIXED_FIXED = """\
import torch
import torch.nn.functional as F
import math


def attend(q, k, v, d_k, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)   # two spaces before this comment
    scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
    w = F.softmax(scores, dim=-1)
    out = (w @ v).transpose(1, 2)
    return out.reshape(out.size(0), -1)
"""


def test_diff_shows_every_fix_and_changes_nothing(tmp_path):
    (tmp_path / "model.py").write_text(MIXED)
    result = invoke("--diff", "model.py", cwd=tmp_path)
    assert result.exit_code == 1
    assert (tmp_path / "model.py").read_text() == MIXED
    for line in (
        "+import math",
        "-    w = F.softmax(scores, dim=-2)",
        "+    w = F.softmax(scores, dim=-1)",
        "+    return out.reshape(out.size(0), -1)",
        "+    scores = scores.masked_fill(mask == 0, torch.finfo",
    ):
        assert line in result.stdout.splitlines() or any(x.startswith(line) for x in result.stdout.splitlines())


def test_fix_writes_every_fix_and_the_file_relints_clean(tmp_path):
    (tmp_path / "model.py").write_text(MIXED)
    before = {f.code for f in lint_text(MIXED)}
    assert {"ATT106", "ATT202", "ATT204", "ATT302"} <= before
    result = invoke("--fix", "--format", "json", "model.py", cwd=tmp_path)
    assert "4 fixed, 0 remaining" in result.stderr
    assert (tmp_path / "model.py").read_text() == MIXED_FIXED
    assert json.loads(result.stdout)["findings"] == []
    again = invoke("--diff", "model.py", cwd=tmp_path)
    assert again.exit_code == 0 and again.stdout == ""


def test_fixes_are_named_but_never_diffed_or_written_into_notebooks(tmp_path):
    notebook = write_notebook(tmp_path / "attention.ipynb")
    original = notebook.read_bytes()
    diff = invoke("--diff", "attention.ipynb", cwd=tmp_path)
    assert diff.stdout == ""  # a diff of the joined cells would not apply to the .ipynb (issue 19)
    assert "no diff for a notebook" in diff.stderr and "(ATT204)" in diff.stderr
    assert diff.exit_code == 1
    fixed = invoke("--fix", "attention.ipynb", cwd=tmp_path)
    assert "fixes are not written into notebooks" in fixed.stderr
    assert notebook.read_bytes() == original
    assert fixed.exit_code == 1  # the finding stays


def test_fixes_are_shown_but_never_written_for_stdin(tmp_path):
    text = FUNCTION.replace("{line}", "q @ k / torch.sqrt(64)")
    diff = invoke("--diff", "-", stdin=text, cwd=tmp_path)
    assert "+    scores = q @ k / math.sqrt(64)" in diff.stdout
    fixed = invoke("--fix", "-", stdin=text, cwd=tmp_path)
    assert "fixes are not written for standard input" in fixed.stderr
    assert fixed.exit_code == 1


FIXABLE = ("ATT106", "ATT201", "ATT202", "ATT204", "ATT302")


@pytest.mark.parametrize("code", FIXABLE)
def test_each_fixable_rule_documents_its_fix(code):
    fix_section = doc(code).split("## Fix", 1)[1].split("\n## ", 1)[0]
    assert "`--fix`" in fix_section


def test_buggy_fixtures_fixed_in_copies_lose_the_fixed_codes(tmp_path):
    paths = [
        path
        for path in sorted((FIXTURES / "buggy").glob("*.py")) + sorted((FIXTURES / "seeds").glob("*.py"))
        if any(f"expect: {code}" in path.read_text(encoding="utf-8") for code in FIXABLE)
    ]
    before: dict[str, Counter[str]] = {}
    offered: dict[str, Counter[str]] = {}
    for path in paths:
        shutil.copy(path, tmp_path / path.name)
        findings = lint_text(path.read_text(encoding="utf-8"))
        before[path.name] = Counter(f.code for f in findings)
        offered[path.name] = Counter(f.code for f in withhold(findings) if f.fix)  # as the run offers them
    assert set(FIXABLE) <= set().union(*offered.values())
    invoke("--fix", "--jobs", "1", ".", cwd=tmp_path)
    for path in paths:
        after = (tmp_path / path.name).read_text(encoding="utf-8")
        cst.parse_module(after)
        remaining = codes(after)
        for code, count in offered[path.name].items():
            assert remaining[code] == before[path.name][code] - count, (path.name, code)


# -- generated variants ----------------------------------------------------------------

_SPACE = st.sampled_from(["", " "])


@settings(max_examples=20, deadline=None)
@given(
    spelling=st.sampled_from(
        [
            "F.softmax({s},{sp}dim{eq}{d})",
            "torch.softmax({s},{sp}{d})",
            "{s}.softmax({d})",
            "{s}.softmax(dim{eq}{d})",
            "nn.Softmax(dim{eq}{d})({s})",
            "F.softmax({s})",
        ]
    ),
    dim=st.sampled_from(["-2", "1", "2", "0", "(2, 3)", "-3", "(-1,)"]),
    name=st.sampled_from(["scores", "attn_logits", "sim", "w"]),
    sp=_SPACE,
    eq=st.sampled_from(["=", " = "]),
)
def test_generated_softmax_dims_fix_round_trips_clean(spelling, dim, name, sp, eq):
    line = spelling.format(s=name, sp=sp, d=dim, eq=eq)
    text = HEADS.replace("scores", name).replace("{line}", line)
    findings = [f for f in lint_text(text) if f.code == "ATT202"]
    assert findings and all(f.fix for f in findings)
    fixed, _ = fixed_text(text, findings=findings)
    assert fixed.splitlines()[:-1] == text.splitlines()[:-1]  # only the softmax line changes
    cst.parse_module(fixed)
    assert "ATT202" not in codes(fixed)


@settings(max_examples=20, deadline=None)
@given(
    head_dim=st.sampled_from(["d_k", "head_dim", "head_size", "dim_head"]),
    owner=st.booleans(),
    wrong=st.sampled_from(
        ["/ math.sqrt({seq})", "/ math.sqrt(C)", "/ {seq} ** 0.5", "* math.sqrt({hd})", "* C ** -0.5", "/ {hd}", ""]
    ),
    seq=st.sampled_from(["T", "S", "seq_len"]),
    sp=_SPACE,
)
def test_generated_scale_mistakes_fix_round_trips_clean(head_dim, owner, wrong, seq, sp):
    hd = f"self.{head_dim}" if owner else head_dim
    keep = f"        self.{head_dim} = d_model // num_heads\n" if owner else ""
    params = "self, x" if owner else f"self, x, {head_dim}"
    scores = f"torch.matmul(q,{sp}k.transpose(-2, -1)) {wrong.format(seq=seq, hd=hd)}".rstrip()
    text = (
        "import math\nimport torch\nimport torch.nn as nn\n\n\nclass A(nn.Module):\n"
        "    def __init__(self, d_model, num_heads):\n        super().__init__()\n"
        f"        self.num_heads = num_heads\n{keep}        self.qkv = nn.Linear(d_model, 3 * d_model)\n\n"
        f"    def forward({params}):\n        B, {seq}, C = x.shape\n"
        f"        q, k, v = self.qkv(x).view(B, {seq}, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)\n"
        f"        s = {scores}\n        return torch.softmax(s, dim=-1) @ v\n"
    )
    findings = [f for f in lint_text(text) if f.code == "ATT201"]
    assert findings and all(f.fix for f in findings), text
    fixed, _ = fixed_text(text, findings=findings)
    cst.parse_module(fixed)
    assert "ATT201" not in codes(fixed), fixed


@settings(max_examples=20, deadline=None)
@given(
    argument=st.sampled_from(["64", "d_k", "self.d_k", "q.size(-1)", "q.shape[-1]", "E // H", "float(d)"]),
    sp=_SPACE,
    imported=st.sampled_from(["", "import math\n", "import math as mth\n"]),
)
def test_generated_sqrt_of_number_fix_round_trips_clean(argument, sp, imported):
    text = (
        f"import torch\n{imported}\n\nclass A:\n    def __init__(self, d_model, h):\n"
        "        self.d_k = d_model // h\n\n    def forward(self, q, k, d_k, d, E, H):\n"
        f"        return q @ k / torch.sqrt({sp}{argument}{sp})\n"
    )
    findings = [f for f in lint_text(text) if f.code == "ATT204"]
    assert findings
    fixed, _ = fixed_text(text, findings=findings)
    assert fixed.count("import math") == 1
    cst.parse_module(fixed)
    assert "ATT204" not in codes(fixed)
