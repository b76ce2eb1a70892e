"""The public codes of attncheck, their names and severities, and their docs.

Codes are stable public API: users write them in ``select``, ``ignore`` and
suppression comments. New codes may be added; none is ever renumbered. The long
explanation of each code lives in ``rules/CODE.md`` (packaged with the wheel),
so ``attncheck rule CODE`` and the documentation can never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from attncheck.findings import Severity


@dataclass(frozen=True)
class CodeInfo:
    code: str
    name: str
    severity: Severity
    summary: str


def _entries() -> Iterable[CodeInfo]:
    E, W = Severity.ERROR, Severity.WARNING  # noqa: N806 - short names keep the table readable
    table = [
        ("ATT101", "missing-qkv-projection", E, "inputs split into heads with no learned Q/K/V projection"),
        ("ATT102", "missing-output-projection", E, "heads merged but no output projection applied"),
        ("ATT103", "unused-dropout", E, "attention dropout defined but never applied, or its result discarded"),
        ("ATT104", "head-split-layout", E, "(b, s, d) split into heads with view(b, h, s, dh) and no transpose"),
        ("ATT105", "head-merge-layout", E, "(b, h, s, dh) merged with view(b, s, d) without transposing back"),
        ("ATT106", "view-after-transpose", E, ".view on a transposed tensor without .contiguous()"),
        ("ATT201", "wrong-scale", E, "scores not scaled by 1/sqrt(head_dim)"),
        ("ATT202", "softmax-dim", E, "softmax not taken over the key axis"),
        ("ATT203", "softmax-order", E, "scale or mask applied after the softmax"),
        ("ATT204", "sqrt-of-number", E, "torch.sqrt called on a Python number"),
        ("ATT205", "softmax-discarded", E, "softmax result overwritten before it is used"),
        ("ATT206", "output-discarded", E, "attention output computed and something else returned"),
        ("ATT301", "multiplicative-mask", E, "mask multiplied into the scores, or a 0/1 mask added"),
        ("ATT302", "mask-fill-value", E, "masked_fill value that overflows float16 or masks nothing"),
        ("ATT303", "fully-masked-nan", W, "-inf fill with no guard: a query with no visible key yields NaN"),
        ("ATT304", "mask-polarity", E, "mask convention inverted relative to the module's own documentation"),
        ("ATT305", "causal-diagonal", E, "causal mask with the wrong diagonal or alignment"),
        ("ATT306", "mask-head-tiling", E, "per-example mask tiled head-major with .repeat(h, 1, 1) for (b * h) rows"),
        ("ATT401", "gqa-grouping", E, "K/V heads tiled where query head h must use KV head h // group"),
        ("ATT402", "rope-rotation", E, "rotary embedding rotated the wrong way"),
        ("ATT403", "rope-shape", E, "cos/sin built or sliced with the wrong width"),
        ("ATT404", "rope-on-value", E, "rotary embedding applied to V"),
        ("ATT405", "position-bias-transposed", E, "relative-position bias applied with query and key swapped"),
        ("ATT901", "forward-crash", E, "the forward pass raises for a documented input"),
        ("ATT902", "output-shape", E, "output shape differs from (batch, seq_q, d_model)"),
        ("ATT903", "reference-mismatch", E, "output differs from the reference and no known mistake explains it"),
        ("ATT904", "batch-leak", E, "an output row depends on another batch element"),
        ("ATT905", "query-leak", E, "a query's output depends on other queries"),
        ("ATT906", "future-leak", E, "a causal module lets a token see later tokens"),
        ("ATT907", "unused-parameter", E, "a parameter gets no gradient from the output"),
        ("ATT908", "eval-nondeterminism", E, "output differs between two eval-mode calls"),
        ("ATT909", "low-precision", E, "fails or loses accuracy in float16/bfloat16 beyond a naive reference"),
    ]
    return (CodeInfo(code, name, severity, summary) for code, name, severity, summary in table)


CODES: dict[str, CodeInfo] = {info.code: info for info in _entries()}
"""Every public code, in numeric order."""


def lookup(code_or_name: str) -> CodeInfo | None:
    """Find a code by its code (``ATT201``, any case) or its name (``wrong-scale``)."""
    key = code_or_name.strip()
    if key.upper() in CODES:
        return CODES[key.upper()]
    return next((info for info in CODES.values() if info.name == key.lower()), None)


def matches(code: str, selectors: Iterable[str]) -> bool:
    """True when ``code`` is named by one of ``selectors`` (codes or prefixes: ``ATT2``, ``ALL``)."""
    return any(sel.upper() == "ALL" or code.startswith(sel.upper()) for sel in selectors)


def _docs_dir() -> Path:
    # In a wheel the docs are packaged as attncheck/rules_docs; in a source
    # checkout (editable install, tests) they are the top-level rules/ folder.
    packaged = Path(str(resources.files("attncheck"))) / "rules_docs"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "rules"


@cache
def doc(code: str) -> str | None:
    """The Markdown doc of a code, or None when it has none."""
    path = _docs_dir() / f"{code.upper()}.md"
    return path.read_text(encoding="utf-8") if path.is_file() else None
