"""What of a module's top level the dynamic check runs: all of it, or its definitions only.

Importing a script runs its top level: a training loop, a download, ``input()``, a data file
read. None of that is the attention under test, and it may hang, fail or take minutes. A static
look at the top level decides (``read``): a module whose top level only defines (imports,
functions, classes, simple constants, configuration calls such as seeding) is imported whole;
one that does real work, and every notebook, runs its definitions only. The definitions-only
text keeps every line where it was (what is left out becomes blanks), so tracebacks and
findings keep their line numbers. Only ``ast`` is used: this runs in the parent, before torch.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

# Calls that do real work wherever they appear at the top level: reading or fetching data,
# asking the user, training, plotting, running a program.
WORK_CALLS = frozenset({
    "input", "open", "load", "download", "urlretrieve", "urlopen", "read_csv", "load_dataset",
    "from_pretrained", "parse_args", "fit", "train", "backward", "step", "show", "savefig",
    "save", "run", "main", "sleep", "system", "Popen", "loadtxt", "fromfile", "hf_hub_download",
})
# Calls made as statements of their own that configure rather than work (seeding, warnings,
# logging, ``sys.path.insert``, ``__all__.extend``): kept by definitions-only loading, and no
# reason to leave the whole file out.
SETUP_CALLS = frozenset({
    "manual_seed", "seed", "filterwarnings", "simplefilter", "basicConfig", "setLevel", "set_verbosity",
    "set_printoptions", "set_default_dtype", "set_grad_enabled", "use_deterministic_algorithms",
    "setdefault", "append", "insert", "extend", "update", "register", "disable_warnings",
})

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")  # lines as the tokenizer counts them


# Calls that end the process. A module that exits while being imported refuses to be imported:
# not work to leave out, but what the import reports (definitions-only loading still drops them).
EXITS = frozenset({"exit", "quit", "_exit", "abort"})


@dataclass(frozen=True)
class Work:
    """A top-level statement that does real work, for the target's reason."""

    line: int
    what: str


@dataclass(frozen=True)
class TopLevel:
    """The static look at a module's top level.

    ``work`` lists what makes a whole import wrong (empty: import it whole); ``definitions`` is
    the text with every statement but definitions blanked out; ``dropped`` the line ranges
    (first, last) it blanks; ``skipped`` how many top-level statements that is.
    """

    work: tuple[Work, ...]
    definitions: str
    dropped: tuple[tuple[int, int], ...]

    @property
    def skipped(self) -> int:
        return len(self.dropped)


def read(text: str) -> TopLevel | None:
    """The top level of ``text``; None when it does not parse (the import then says why)."""
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    defined = _defined_callables(module.body)
    work: list[Work] = []
    dropped: list[ast.stmt] = []
    skipped_names: set[str] = set()
    for statement in module.body:
        work += _work(statement)
        if not _kept(statement, defined, skipped_names):
            dropped.append(statement)
            skipped_names |= _bound_names(statement)
    spans = tuple((_first_line(s), s.end_lineno or s.lineno) for s in dropped)
    return TopLevel(tuple(work), _blanked(text, dropped), spans)


def describe(work: Iterable[Work], limit: int = 3) -> str:
    """``a loop at line 12, input() at line 3`` for the first few statements of work."""
    items = list(work)
    text = ", ".join(f"{w.what} at line {w.line}" for w in items[:limit])
    return text + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _work(statement: ast.stmt) -> list[Work]:
    if _is_main_guard(statement) or isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return []
    if isinstance(statement, (ast.For, ast.AsyncFor, ast.While)):
        return [Work(statement.lineno, "a loop")]
    if isinstance(statement, (ast.With, ast.AsyncWith)):
        return [Work(statement.lineno, "a with block")]
    if isinstance(statement, (ast.If, ast.Try)):
        return [w for inner in _branches(statement) for w in _work(inner)][:1]
    found = [Work(call.lineno, f"{_callee(call)}()") for call in _calls(statement) if _callee(call) in WORK_CALLS]
    value = statement.value if isinstance(statement, ast.Expr) else None
    if isinstance(value, ast.Call) and not found and _callee(value) not in SETUP_CALLS | EXITS:
        found.append(Work(statement.lineno, f"a call of {_callee(value) or 'an expression'}()"))
    return found[:1]


def _kept(statement: ast.stmt, defined: set[str], skipped: set[str]) -> bool:
    """Whether definitions-only loading runs ``statement``."""
    if isinstance(statement, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef,
                              ast.ClassDef, ast.Pass)):
        return True
    if _is_main_guard(statement):
        return False
    if isinstance(statement, ast.Expr):
        value = statement.value
        if isinstance(value, ast.Constant):
            return True  # a docstring
        return isinstance(value, ast.Call) and _callee(value) in SETUP_CALLS and _simple(value, defined, skipped)
    if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        return statement.value is not None and _simple(statement.value, defined, skipped)
    if isinstance(statement, (ast.If, ast.Try)):
        if isinstance(statement, ast.If) and not _simple(statement.test, defined, skipped):
            return False
        return all(_kept(inner, defined, skipped) for inner in _branches(statement))
    return False


def _simple(expression: ast.expr, defined: set[str], skipped: set[str]) -> bool:
    """An expression that only computes a value: it calls nothing that works and none of the file's
    own functions or classes (an instance of the file's model is left out), and uses no name a
    left-out statement binds."""
    for node in ast.walk(expression):
        if isinstance(node, ast.Name) and node.id in skipped:
            return False
        if isinstance(node, (ast.Lambda, ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr)):
            return False
        if isinstance(node, ast.Call):
            name = _callee(node)
            if name in WORK_CALLS or name in defined:
                return False
    return True


def _branches(statement: ast.If | ast.Try) -> Iterator[ast.stmt]:
    yield from statement.body
    yield from statement.orelse
    if isinstance(statement, ast.Try):
        for handler in statement.handlers:
            yield from handler.body
        yield from statement.finalbody


def _is_main_guard(statement: ast.stmt) -> bool:
    """``if __name__ == "__main__":``: never runs on import (the module has another name)."""
    if not isinstance(statement, ast.If) or not isinstance(statement.test, ast.Compare):
        return False
    parts = [statement.test.left, *statement.test.comparators]
    return any(isinstance(p, ast.Name) and p.id == "__name__" for p in parts) and any(
        isinstance(p, ast.Constant) and p.value == "__main__" for p in parts
    )


def _calls(node: ast.AST) -> Iterator[ast.Call]:
    """The calls in ``node``, not looking into the bodies of functions and classes it defines."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(child, ast.Call):
            yield child
        yield from _calls(child)


def _callee(call: ast.Call) -> str:
    """The last name of what is called: ``torch.load`` -> ``load``; '' for anything else."""
    function = call.func
    if isinstance(function, ast.Attribute):
        return function.attr
    return function.id if isinstance(function, ast.Name) else ""


def _defined_callables(body: list[ast.stmt]) -> set[str]:
    return {s.name for s in body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _bound_names(statement: ast.stmt) -> set[str]:
    return {
        node.id for node in ast.walk(statement) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    }


def _first_line(statement: ast.stmt) -> int:
    decorators = getattr(statement, "decorator_list", [])
    return min([statement.lineno, *(d.lineno for d in decorators)])


def _blanked(text: str, dropped: list[ast.stmt]) -> str:
    """``text`` with each dropped statement's characters removed, every line break kept.

    ``ast`` columns count UTF-8 bytes, so lines are cut as bytes. What is left on a line a
    dropped statement touched are pieces of kept statements that shared it (``x = 1; main()``);
    they are joined again with ``; `` and lose the room around them, so that a statement
    that now starts the line starts it as a top-level statement must.
    """
    lines = [line.encode("utf-8") for line in _LINE.findall(text)]
    cuts: dict[int, list[tuple[int, int]]] = {}
    for statement in dropped:
        last = (statement.end_lineno or statement.lineno) - 1
        for index in range(statement.lineno - 1, last + 1):
            start = statement.col_offset if index == statement.lineno - 1 else 0
            end = statement.end_col_offset if index == last else None
            cuts.setdefault(index, []).append((start, end if end is not None else len(lines[index])))
    for index, ranges in cuts.items():
        line = lines[index]
        body = line.rstrip(b"\r\n")
        pieces, position = [], 0
        for start, end in sorted(ranges):
            pieces.append(body[position:start])
            position = max(position, end)
        pieces.append(body[position:])
        kept = [piece.strip(b" \t;") for piece in pieces]
        lines[index] = b"; ".join(piece for piece in kept if piece) + line[len(body):]
    return "".join(line.decode("utf-8", errors="replace") for line in lines)
