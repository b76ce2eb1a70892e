"""Fuzz the static path for a given time: does attncheck survive any input?

Inputs are mutations of ``fixtures/`` and of the rules' own examples (number literals
respelled in other bases, underscores and huge sizes; line breaks turned into ``\\r`` or
``\\r\\n``; form feeds and other characters ``str.splitlines`` splits at put into lines;
expressions nested deep; lines dropped or repeated), plus programs from hypothesmith and
pysource-codegen when they are installed (the ``fuzz`` extra). Batches of inputs are
linted by the installed attncheck in a subprocess (``--worker``), with a time limit per
file, and each outcome is classified:

- ``internal``: an exception escaped, or a file's error says ``internal error``/``crashed``;
- ``hang``: the worker had to be killed (the run itself would have blocked);
- ``stopped``: the file's analysis was stopped at ``--per-file`` seconds: a clean one-line
  error for that file (what a hang becomes), counted apart as a slow input;
- ``position``: a finding's line or column lies outside the file;
- ``fix``: ``--fix``'s text does not parse (where the input did) or changes bytes outside
  the span of its edits.

Each finding is shrunk (lines, then characters, kept while the outcome stays the same) and
written to ``--out``; the counts are printed. Usage: ``python bench/fuzz.py --minutes 20``.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BATCH = 16
PER_FILE_S = 20.0
_NUMBER = re.compile(r"(?<![\w.])\d+(?![\w.])")


# -- inputs -----------------------------------------------------------------------


def seeds() -> list[str]:
    """The fixtures' texts and the rules' examples."""
    found = [p.read_text(encoding="utf-8", errors="replace") for p in sorted((ROOT / "fixtures").rglob("*.py"))]
    sys.path.insert(0, str(ROOT))
    from attncheck.static.rules import all_rules

    for rule in all_rules():
        found += [textwrap.dedent(code) for code in rule.VALID]
        found += [textwrap.dedent(example.code) for example in rule.INVALID]
    return [text for text in found if text.strip()]


def _respell(text: str, rng: random.Random) -> str:
    def spell(match: re.Match[str]) -> str:
        if len(match.group()) > 100:  # already made huge: int() would refuse it
            return match.group()
        n = int(match.group())
        return rng.choice([hex(n), oct(n), bin(n), "_".join(str(n)), str(n) + "0" * rng.choice([20, 400, 4400])])

    return _NUMBER.sub(lambda m: spell(m) if rng.random() < 0.5 else m.group(), text)


def _line_breaks(text: str, rng: random.Random) -> str:
    ending = rng.choice(["\r", "\r\n", "\n"])
    lines = text.split("\n")
    odd = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(lines))
        lines[at] = lines[at] + "  # " + rng.choice(odd) + " note"
    if rng.random() < 0.3:
        lines.insert(0, "\n".join(f"x_{n} = {n}" for n in range(420)))  # a large file: the scan
    return ending.join(lines)


def _deepen(text: str, rng: random.Random) -> str:
    depth = rng.choice([50, 200, 600, 1100])
    shape = rng.choice([
        "(" * depth + "x" + ")" * depth,
        "[" * depth + "]" * depth,
        "s" + ".view(1)" * depth,
        " + ".join(["q"] * depth),
        "s" + "[0]" * depth,
        "-" * depth + "1",
        "f(" * depth + "x" + ")" * depth,
    ])
    lines = text.split("\n")
    at = rng.randrange(len(lines) + 1)
    indent = re.match(r"\s*", lines[at - 1]).group() if at else ""
    return "\n".join([*lines[:at], f"{indent}deep = {shape}", *lines[at:]])


def _lines(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    at = rng.randrange(len(lines))
    if rng.random() < 0.5:
        del lines[at]
    else:
        lines.insert(rng.randrange(len(lines) + 1), lines[at])
    return "\n".join(lines)


def _characters(text: str, rng: random.Random) -> str:
    if not text:
        return text
    at = rng.randrange(len(text))
    return text[:at] + rng.choice(["", "(", ")", ":", "\n", " ", "((", "))", "\r", "\x0c", "0x1"]) + text[at + 1:]


# The mutations that keep a text shallow enough to lint in milliseconds (the suite's property test).
SHALLOW_MUTATIONS: list[Callable[[str, random.Random], str]] = [_respell, _line_breaks, _lines, _characters]
MUTATIONS = [*SHALLOW_MUTATIONS, _deepen]


def generated(rng: random.Random) -> Iterator[str]:
    """Programs from hypothesmith and pysource-codegen, where installed; nothing otherwise."""
    try:
        import hypothesmith
        from hypothesis import HealthCheck, given, settings
    except ImportError:
        return
    found: list[str] = []

    @settings(max_examples=20, database=None, suppress_health_check=list(HealthCheck), deadline=None)
    @given(hypothesmith.from_grammar())
    def collect(text: str) -> None:
        found.append(text)

    collect()
    yield from found
    try:
        from pysource_codegen import generate
    except ImportError:
        return
    for _ in range(10):
        try:
            yield generate(rng.randrange(1 << 30))
        except Exception:  # the generator's own bug: not attncheck's
            continue


def inputs(rng: random.Random) -> Iterator[str]:
    pool = seeds()
    while True:
        for text in generated(rng):
            yield text + "\n" + rng.choice(pool) if rng.random() < 0.5 else text
        for _ in range(200):
            text = rng.choice(pool)
            for mutate in rng.sample(MUTATIONS, rng.randint(1, 3)):
                text = mutate(text, rng)
            yield text


# -- the worker: one batch in the installed attncheck --------------------------------


def worker(folder: Path, per_file_s: float) -> None:
    """Lint each file of ``folder``, printing one JSON line per file: its problems."""
    from attncheck import pipeline
    from attncheck.config import Settings
    from attncheck.discovery import Candidate
    from attncheck.static import deadline

    deadline.STATIC_TIME_LIMIT_S = per_file_s
    codes = pipeline.enabled_codes(Settings())
    for path in sorted(folder.iterdir()):
        print(json.dumps({"start": path.name}), flush=True)
        try:
            found = problems(pipeline.lint_one(Candidate(path, str(path), explicit=True), codes))
        except Exception as error:
            found = [f"internal: {type(error).__name__}: {error}"[:300]]
        print(json.dumps({"done": path.name, "problems": found}), flush=True)


def problems(result) -> list[str]:
    """What is wrong with one file's result (a FileResult or FileError): the fuzzer's verdict."""
    from attncheck.fixes import fix_source
    from attncheck.line_table import split_lines
    from attncheck.sources import FileError
    from attncheck.static import deadline

    if isinstance(result, FileError):
        if deadline.is_gave_up(result.message):
            return ["stopped: at the per-file time limit"]
        if "internal error" in result.message or "crashed" in result.message:
            return ["internal: " + result.message]
        return []
    found = []
    lines = split_lines(result.source.text)
    for finding in result.findings:
        at = result.source.file_line(finding.span)
        if not (1 <= at <= len(lines) and 1 <= finding.span.column <= len(lines[at - 1]) + 1):
            found.append(f"position: {finding.code} at {at}:{finding.span.column}")
    fixed = fix_source(result.source, result.findings)
    if fixed is not None and fixed.fixed:
        found += _damage(result.source.text, fixed)
    return found


def _damage(before: str, fixed) -> list[str]:
    try:
        ast.parse(before)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    try:
        ast.parse(fixed.text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ["fix: the fixed text does not parse"]
    edits = sorted((e for f in fixed.fixed for e in f.fix), key=lambda e: e.start)
    head, tail = edits[0].start, len(before) - edits[-1].end
    after = fixed.text
    if before[:head] != after[:head] or before[len(before) - tail:] != after[len(after) - tail:]:
        return ["fix: bytes outside the edits changed"]
    return []


# -- the driver ------------------------------------------------------------------------


def run_batch(texts: list[str], per_file_s: float) -> list[list[str]]:
    """The problems of each text, from one worker subprocess (a killed worker: ``hang``)."""
    with tempfile.TemporaryDirectory(prefix="attncheck-fuzz-") as folder:
        names = [f"input_{n:03d}.py" for n in range(len(texts))]
        for name, text in zip(names, texts, strict=True):
            Path(folder, name).write_bytes(text.encode("utf-8", errors="surrogatepass"))
        command = [sys.executable, __file__, "--worker", folder, "--per-file", str(per_file_s)]
        answers: dict[str, list[str]] = {}
        started = None
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=per_file_s * 2 * len(texts) + 30,
                                  check=False, cwd=tempfile.gettempdir())
            output, crashed = done.stdout, done.returncode != 0
        except subprocess.TimeoutExpired as expired:
            partial = expired.stdout or b""
            output, crashed = partial.decode() if isinstance(partial, bytes) else partial, True
        for line in output.splitlines():
            record = json.loads(line)
            if "start" in record:
                started = record["start"]
            else:
                answers[record["done"]] = record["problems"]
        if crashed and started is not None and started not in answers:
            answers[started] = ["hang or crash: the worker died on this file"]
        return [answers.get(name, []) for name in names]


def kind(problems: list[str]) -> str | None:
    return problems[0].split(":")[0].split(" ")[0] if problems else None


def shrink(text: str, wanted: str, per_file_s: float, budget_s: float) -> str:
    """A smaller text with the same kind of problem: lines, then characters, dropped while it stays."""
    end = time.monotonic() + budget_s

    def same(candidate: str) -> bool:
        return time.monotonic() < end and kind(run_batch([candidate], per_file_s)[0]) == wanted

    for unit in ("lines", "characters"):
        pieces = text.splitlines(keepends=True) if unit == "lines" else list(text)
        chunk = max(1, len(pieces) // 2)
        while chunk >= 1 and time.monotonic() < end:
            at, changed = 0, False
            while at < len(pieces) and time.monotonic() < end:
                candidate = pieces[:at] + pieces[at + chunk:]
                if candidate and same("".join(candidate)):
                    pieces, changed = candidate, True
                else:
                    at += chunk
            if not changed:
                chunk //= 2
        text = "".join(pieces)
        if unit == "lines" and len(text) > 2000:
            break  # characters one at a time would take the whole budget
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "fuzz-found")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-file", type=float, default=PER_FILE_S, help="time limit of one file's analysis (s)")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker, args.per_file)
        return
    rng = random.Random(args.seed)
    end = time.monotonic() + args.minutes * 60
    counts: Counter[str] = Counter()
    tried = 0
    source = inputs(rng)
    args.out.mkdir(parents=True, exist_ok=True)
    while time.monotonic() < end:
        texts = [next(source) for _ in range(BATCH)]
        for text, problems in zip(texts, run_batch(texts, args.per_file), strict=True):
            tried += 1
            found = kind(problems)
            if found is None:
                continue
            counts[found] += 1
            small = shrink(text, found, args.per_file, budget_s=60)
            name = args.out / f"{found}_{counts[found]:03d}.py"
            name.write_bytes(small.encode("utf-8", errors="surrogatepass"))
            print(f"{found}: {problems[0][:200]} -> {name}", flush=True)
    print(f"{tried} inputs in {args.minutes:g} min; " + (", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
                                                          or "no internal error, hang, bad position or damaging fix"))
    sys.exit(1 if counts else 0)


if __name__ == "__main__":
    main()
