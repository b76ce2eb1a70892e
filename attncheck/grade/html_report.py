"""``report.html``: one self-contained file (no CDN, no network) a grader opens in a browser.

A sortable table (click a header; ``report.html#sort=score`` opens it sorted), a heatmap of
submissions x rubric groups, the score distribution, and per student their module's attention
weights beside the reference's for one input, all drawn as inline SVG; the only script sorts.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from attncheck.dynamic.probes.sizes import drawn
from attncheck.grade.record import Grade

CELL = 26
BINS = 10
SORT_SCRIPT = """
document.querySelectorAll('table.grades th').forEach((th, col) => th.addEventListener('click', () => {
  const body = th.closest('table').tBodies[0];
  const rows = Array.from(body.rows);
  const down = th.dataset.order !== 'asc';
  th.dataset.order = down ? 'asc' : 'desc';
  const key = r => { const t = r.cells[col].dataset.sort ?? r.cells[col].textContent; const n = parseFloat(t);
                     return isNaN(n) ? t : n; };
  rows.sort((a, b) => (key(a) > key(b) ? 1 : key(a) < key(b) ? -1 : 0) * (down ? 1 : -1));
  rows.forEach(r => body.appendChild(r));
}));
const wanted = new URLSearchParams(location.hash.slice(1)).get('sort');  // report.html#sort=score
document.querySelectorAll('table.grades th').forEach(th => { if (th.textContent === wanted) th.click(); });
"""
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table.grades { border-collapse: collapse; } th { cursor: pointer; background: #eee; }
td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
.weights { display: flex; gap: 2em; flex-wrap: wrap; } figure { margin: 0; }
"""


def _color(fraction: float) -> str:
    """Red (0) through yellow to green (1)."""
    fraction = min(1.0, max(0.0, fraction))
    red = 220 if fraction < 0.5 else int(220 * (1 - fraction) * 2)
    green = int(200 * fraction * 2) if fraction < 0.5 else 200
    return f"rgb({red},{green},80)"


def _table(grades: Sequence[Grade], groups: Sequence[str]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in ("student", "score", "max", "status", *groups, "mistakes"))
    rows = []
    for grade in grades:
        earned = {g["group"]: g["score"] for g in grade.groups}
        cells = [f'<td><a href="#{escape(grade.student)}">{escape(grade.student)}</a></td>',
                 f"<td>{grade.score:g}</td>", f"<td>{grade.maximum:g}</td>", f"<td>{escape(grade.status)}</td>"]
        cells += [f"<td>{earned.get(g, 0):g}</td>" for g in groups]
        cells.append(f"<td>{escape(grade.codes())}</td>")
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return f'<table class="grades" id="grades"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _heatmap(grades: Sequence[Grade], groups: Sequence[str]) -> str:
    label_w, top = 120, 90
    width, height = label_w + CELL * len(groups), top + CELL * len(grades)
    parts = [f'<svg id="heatmap" width="{width}" height="{height}" role="img" aria-label="submissions by checks">']
    for column, group in enumerate(groups):
        x = label_w + column * CELL + CELL // 2
        parts.append(f'<text x="{x}" y="{top - 6}" transform="rotate(-60 {x} {top - 6})" font-size="11">'
                     f"{escape(group)}</text>")
    for row, grade in enumerate(grades):
        y = top + row * CELL
        parts.append(f'<text x="0" y="{y + 17}" font-size="12">{escape(grade.student)}</text>')
        by_group = {g["group"]: g for g in grade.groups}
        for column, group in enumerate(groups):
            found = by_group.get(group)
            fraction = found["score"] / found["maximum"] if found and found["maximum"] else 1.0
            tip = f"{grade.student} {group}: {found['score']:g}/{found['maximum']:g}" if found else group
            parts.append(f'<rect x="{label_w + column * CELL}" y="{y}" width="{CELL - 2}" height="{CELL - 2}" '
                         f'fill="{_color(fraction)}"><title>{escape(tip)}</title></rect>')
    return "".join(parts) + "</svg>"


def _distribution(grades: Sequence[Grade]) -> str:
    counts = [0] * BINS
    for grade in grades:
        fraction = grade.score / grade.maximum if grade.maximum else 0.0
        counts[min(BINS - 1, int(fraction * BINS))] += 1
    tallest = max(counts) or 1
    bar_w, height = 36, 160
    parts = [f'<svg id="distribution" width="{bar_w * BINS + 20}" height="{height + 30}" role="img" '
             'aria-label="score distribution">']
    for index, count in enumerate(counts):
        bar = int(height * count / tallest)
        x = 10 + index * bar_w
        parts.append(f'<rect x="{x}" y="{height - bar}" width="{bar_w - 4}" height="{bar}" fill="#4a7bd0">'
                     f"<title>{index * 10}-{index * 10 + 10}%: {count}</title></rect>")
        parts.append(f'<text x="{x}" y="{height + 14}" font-size="10">{index * 10}%</text>')
    return "".join(parts) + "</svg>"


def _matrix(weights: Sequence[Sequence[float]], title: str) -> str:
    size = min(CELL, 240 // max(1, len(weights)))
    rows, columns = len(weights), max((len(r) for r in weights), default=0)
    top = max((max(r) for r in weights if r), default=1.0) or 1.0
    parts = [f'<figure><svg class="attention" width="{columns * size}" height="{rows * size}" role="img" '
             f'aria-label="{escape(title)}">']
    for i, row in enumerate(weights):
        for j, value in enumerate(row):
            shade = int(255 * (1 - min(1.0, max(0.0, value / top))))
            parts.append(f'<rect x="{j * size}" y="{i * size}" width="{size}" height="{size}" '
                         f'fill="rgb({shade},{shade},255)"><title>query {i}, key {j}: {value:.3f}</title></rect>')
    return "".join(parts) + f"</svg><figcaption>{escape(title)}</figcaption></figure>"


def _student(grade: Grade) -> str:
    parts = [f'<section id="{escape(grade.student)}"><h3>{escape(grade.student)}: {grade.score:g} / '
             f"{grade.maximum:g} ({escape(grade.status)})</h3>"]
    if grade.problem:
        parts.append(f"<p>{escape(grade.problem)}</p>")
    if grade.mistakes:
        items = "".join(f"<li>{escape(m.where)}: {escape(m.code)} {escape(m.name)}: {escape(m.message)}</li>"
                        for m in grade.mistakes)
        parts.append(f"<ul>{items}</ul>")
    if "student" in grade.weights:
        figures = [_matrix(grade.weights["student"], "their module (batch 0, head 0)")]
        if "reference" in grade.weights:
            figures.append(_matrix(grade.weights["reference"], "reference, same projections"))
        parts.append(f'<div class="weights">{"".join(figures)}</div>')
    return "".join(parts) + "</section>"


def render(grades: Sequence[Grade], groups: Sequence[str], title: str, asked_for: str, seed: int) -> str:
    """The whole page."""
    body = [
        f"<h1>{escape(title)}</h1>",
        f"<p>Asked for: {escape(asked_for)}. {len(grades)} submissions; inputs drawn with seed {seed}, "
        f"{drawn(seed)} (reproduce with --seed {seed}).</p>",
        "<h2>Grades</h2>", _table(grades, groups),
        "<h2>Submissions x checks</h2>", _heatmap(grades, groups),
        "<h2>Score distribution</h2>", _distribution(grades),
        "<h2>Students</h2>", *(_student(g) for g in grades),
    ]
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{STYLE}</style></head><body>{''.join(body)}<script>{SORT_SCRIPT}</script></body></html>\n")
