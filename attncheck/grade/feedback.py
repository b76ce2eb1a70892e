"""Per-student feedback in words a learner understands.

For each mistake: where it is (the line, or the notebook cell), what attncheck saw, and why it
is wrong, in the catalogue's own words (the "Why is this bad?" section of ``rules/ATTxxx.md``).
Never the reference solution: the catalogue's "Example", "Use instead" and "Fix" sections, and
the checker's suggested fixes, stay out.
"""

from __future__ import annotations

import re
from functools import cache

from attncheck.catalogue import doc
from attncheck.dynamic.probes.sizes import Sizes
from attncheck.grade.assignment import Assignment
from attncheck.grade.record import GRADED, Grade, Mistake

WHY = "## Why is this bad?"
GROUP_WORDS = {
    "shape": "runs and returns the right shape",
    "reference": "matches scaled dot-product attention",
    "mask": "honours the attention mask",
    "causal": "keeps each token from seeing later ones",
    "independence": "keeps batch elements and queries independent",
    "gradients": "every parameter learns (gets a gradient)",
    "dropout": "dropout only in training, deterministic in eval",
    "low_precision": "works in float16 and bfloat16",
    "variant": "the variant asked for (grouped-query or rotary)",
    "static": "code review (static checks)",
}


@cache
def why(code: str) -> str:
    """The catalogue's explanation of a code, as one paragraph ('' when it has none)."""
    text = doc(code) or ""
    if WHY not in text:
        return ""
    section = text.split(WHY, 1)[1].split("\n## ", 1)[0]
    return re.sub(r"\s+", " ", section).strip()


def feedback(grade: Grade, task: Assignment) -> str:
    """The Markdown a student reads."""
    lines = [f"# {task.name}: feedback for {grade.student}", "", f"Asked for: {task.asked_for()}.", ""]
    lines.append(f"**Score: {grade.score:g} / {grade.maximum:g}**")
    lines.append("")
    if grade.status != GRADED:
        lines += [f"Your submission {grade.status}: {grade.problem}", ""]
    elif grade.problem:
        lines += [f"Note: {grade.problem}", ""]
    if grade.target:
        lines += [f"Graded: `{grade.target}` in `{grade.file}`, on inputs of {Sizes(**grade.sizes)}.", ""]
    mistakes = [m for m in grade.mistakes if m.counts]
    if mistakes:
        lines += ["## What to fix", ""]
        for mistake in mistakes:
            lines += _mistake(mistake)
    elif grade.status == GRADED:
        lines += ["No mistakes found.", ""]
    advice = [m for m in grade.mistakes if not m.counts and m.severity != "info"]
    if advice:
        lines += ["## Advice (no points lost)", ""]
        for mistake in advice:
            lines += _mistake(mistake)
    lines += ["## Checks", "", "| part | points | result |", "|---|---|---|"]
    for group in grade.groups:
        words = GROUP_WORDS.get(group["group"], group["group"])
        lines.append(f"| {words} | {group['score']:g} / {group['maximum']:g} | {group['status']} |")
    failed = [(g["group"], c) for g in grade.groups for c in g["checks"] if c[1] == "failed" and g["group"] != "static"]
    if failed:
        lines += ["", "Checks that failed:", ""]
        lines += [f"- {GROUP_WORDS.get(group, group)}: {name}: {detail}" for group, (name, _, detail) in failed]
    return "\n".join(lines) + "\n"


def _mistake(mistake: Mistake) -> list[str]:
    cost = f" (-{mistake.costs:g} points)" if mistake.costs else ""
    lines = [f"### {mistake.where}: {mistake.name} ({mistake.code}){cost}", "", mistake.message, ""]
    explanation = why(mistake.code)
    if explanation:
        lines += [f"Why this is wrong: {explanation}", ""]
    return lines
