"""fast_tree builds the tree libcst would, and the engine trusts it only for "clean"."""

from __future__ import annotations

import ast
import contextlib
import textwrap
from pathlib import Path

import libcst as cst
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcst.metadata import MetadataWrapper, PositionProvider

from attncheck.config import Settings
from attncheck.pipeline import _rules, enabled_codes
from attncheck.sources import Source
from attncheck.static import engine
from attncheck.static.analysis import syntax
from attncheck.static.tree import fast_tree, node_fields, subtree

ROOT = Path(__file__).resolve().parents[2]
# Every fixture, and three of our own modules for breadth (f-strings, decorators, comprehensions).
FILES = sorted([*ROOT.glob("fixtures/**/*.py"),
                *(ROOT / "attncheck" / name
                  for name in ("cli.py", "static/analysis/patterns.py", "dynamic/binding/bind.py"))])
_LEAVES = {cst.Name: "value", cst.Integer: "value", cst.Float: "value", cst.Imaginary: "value",
           cst.SimpleString: "value", cst.Param: "star", cst.Arg: "star", cst.FormattedString: "start",
           cst.FormattedStringText: "value", cst.FormattedStringExpression: "conversion"}
# Where findings are reported and rules look around: these must sit exactly where libcst puts them.
_PLACED = (cst.Call, cst.Name, cst.Attribute, cst.BinaryOperation, cst.Subscript, cst.Integer, cst.Float,
           cst.Assign, cst.AugAssign, cst.FunctionDef, cst.ClassDef, cst.SimpleStatementLine, cst.Return,
           cst.UnaryOperation, cst.Comparison, cst.Lambda, cst.IfExp, cst.List, cst.Dict, cst.If, cst.For)


def _children(node: cst.CSTNode) -> list[cst.CSTNode]:
    return [child for child in node_fields.children(node) if type(child) not in node_fields.TRIVIA]


def _walked_events(module: cst.Module) -> list[tuple[int, int]]:
    """(id, index past its subtree) of the nodes of the event classes, in a pre-order walk."""
    events: list[tuple[int, int] | None] = []

    def visit(node: cst.CSTNode) -> None:
        slot = None
        if node_fields.libcst_class(type(node)) in fast_tree.FastModule.EVENT_CLASSES:
            slot = len(events)
            events.append(None)
        for child in subtree.children(node):
            visit(child)
        if slot is not None:
            events[slot] = (id(node), len(events))

    for child in subtree.children(module):  # the module is not listed: it would be a cycle
        visit(child)
    return events  # type: ignore[return-value]


def _pairs(text: str) -> list[tuple[cst.CSTNode, cst.CSTNode]]:
    """Corresponding nodes of libcst's tree and fast_tree's, asserting the same shape, and
    the fast tree's events the same as a walk of it (walk.py replays them for a walk)."""
    exact, fast = cst.parse_module(text), fast_tree.build(text)
    assert [(id(node), end) for node, end in fast.events] == _walked_events(fast)
    pairs, stack = [], [(exact, fast)]
    while stack:
        a, b = stack.pop()
        assert node_fields.libcst_class(type(b)) is type(a), (type(a).__name__, type(b).__name__)
        field = _LEAVES.get(type(a))
        if field is not None:
            assert getattr(a, field) == getattr(b, field)
        pairs.append((a, b))
        if type(b) in fast_tree.ALWAYS_PLACED:  # Positions.in_tree counts on it
            assert id(b) in fast.positions.spans, type(b).__name__
        left, right = _children(a), _children(b)
        assert [type(n) for n in left] == [node_fields.libcst_class(type(n)) for n in right], type(a).__name__
        stack.extend(zip(left, right, strict=True))
    return pairs


def _assert_same_as_libcst(text: str) -> cst.Module:
    """Assert fast_tree's tree of ``text`` has libcst's shape and positions; return it."""
    pairs = _pairs(text)
    exact_positions = MetadataWrapper(pairs[0][0], unsafe_skip_copy=True).resolve(PositionProvider)
    fast_positions = pairs[0][1].positions
    for a, b in pairs:
        if isinstance(a, _PLACED) and id(b) in fast_positions.spans:
            assert fast_positions[b] == exact_positions[a], (type(a).__name__, fast_positions.text_of(
                fast_positions.spans[id(b)]))
    return pairs[0][1]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_same_tree_and_positions_as_libcst(path: Path) -> None:
    _assert_same_as_libcst(path.read_text(encoding="utf-8"))


_REPEATED = '''
@torch.no_grad()
def rotate_half(x):
    """Rotates half the hidden dims."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1) if f"{x}" else (lambda y: y)(x)
'''


def test_a_function_repeated_across_trees_is_placed_at_its_own_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast_tree, "_CONVERTED", fast_tree._Repeated())
    first = _assert_same_as_libcst(_REPEATED)
    second = _assert_same_as_libcst("import torch\n\n\nx = (1,\n     2)\n" + _REPEATED)
    assert second.body[-1] is not first.body[0]  # kept the second time it is converted
    third = _assert_same_as_libcst("x = 1" + _REPEATED)
    assert third.body[-1] is second.body[-1]  # and placed at its lines in later trees
    assert third.positions[third.body[-1]].start.line == second.positions[second.body[-1]].start.line - 5


def test_a_function_repeated_within_one_tree_is_converted_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast_tree, "_CONVERTED", fast_tree._Repeated())
    method = textwrap.indent(_REPEATED, "    ")
    module = _assert_same_as_libcst(f"class A:{method}\nclass B:{method}")
    one, two = (klass.body.body[0] for klass in module.body)
    assert one is not two  # an analysis keys on nodes: one node stands in one place of a tree


def test_a_node_without_a_position_is_a_gap_not_a_key_error() -> None:
    module = fast_tree.build("x = a < b\n")
    inner = module.body[0].body[0].value.comparisons[0]  # a ComparisonTarget: the conversion places none
    with pytest.raises(fast_tree.MissingPositionError):
        module.positions[inner]
    with pytest.raises(fast_tree.MissingPositionError):  # get_metadata(..., default) must not hide it either
        module.positions.get(inner, None)


def test_a_node_the_analyses_built_is_not_in_the_tree_as_with_libcst() -> None:
    """``b, s, d = x.shape`` binds s to a Subscript facts builds: no position, in either tree."""
    text = "x = q[0]\n"
    built = cst.Subscript(cst.Name("q"), [cst.SubscriptElement(cst.Index(cst.Integer("0")))])
    exact = MetadataWrapper(cst.parse_module(text)).resolve(PositionProvider)
    fast = fast_tree.build(text)
    assert exact.get(built) is None and fast.positions.get(built) is None
    assert fast.positions.get(fast.body[0].body[0].value) is not None


def test_the_positions_iterate_over_the_placed_nodes() -> None:
    module = fast_tree.build("x = f(a) + 1\n")
    assert {id(node) for node in module.positions} == set(module.positions.spans)
    assert len(module.positions) == len(module.positions.spans) > 5


def test_code_for_node_is_the_users_text() -> None:
    text = "y = torch.softmax( scores ,dim = -1 )  # keep\n"
    module = fast_tree.build(text)
    assert module.code_for_node(module.body[0].body[0].value) == "torch.softmax( scores ,dim = -1 )"


def test_columns_count_characters_on_non_ascii_lines() -> None:
    text = "s = 'héllo'; t = q @ k\n"
    pairs = _pairs(text)
    exact = MetadataWrapper(pairs[0][0], unsafe_skip_copy=True).resolve(PositionProvider)
    product = next((a, b) for a, b in pairs if isinstance(a, cst.BinaryOperation))
    assert pairs[0][1].positions[product[1]] == exact[product[0]]


@pytest.mark.parametrize("text", [
    "match x:\n    case 1:\n        pass\n",  # no conversion for match
    "x = 1\r\ny = 2\r\n",  # CRLF: ast and libcst count lines differently
])
def test_unsupported_text_is_refused(text: str) -> None:
    with pytest.raises(fast_tree.NotModelledError):
        fast_tree.build(text)


_CODES = _rules(enabled_codes(Settings()))


def _exact_only(source: Source, monkeypatch: pytest.MonkeyPatch):
    def refuse(text: str) -> cst.Module:
        raise fast_tree.NotModelledError("disabled for the comparison")

    with monkeypatch.context() as patch:
        patch.setattr(fast_tree, "build", refuse)
        return engine.lint(source, _CODES)


def _summary(result) -> tuple:
    return ([(f.code, f.span, f.severity, f.message, f.hint, f.evidence, f.fix) for f in result.findings],
            [(t.name, t.line, t.kinds) for t in result.targets], result.error)


@pytest.mark.parametrize("path", sorted(ROOT.glob("fixtures/**/*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_lint_results_are_those_of_libcsts_tree(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = Source(str(path), path.read_text(encoding="utf-8"))
    assert _summary(engine.lint(source, _CODES)) == _summary(_exact_only(source, monkeypatch))


def test_a_file_the_fast_tree_refuses_is_still_linted() -> None:
    text = ("import torch\n\ndef attend(q, k, v, mode):\n    match mode:\n        case _:\n            pass\n"
            "    return torch.softmax(q @ k.transpose(-2, -1), dim=1) @ v\n")
    codes = [f.code for f in engine.lint(Source("m.py", text), _CODES).findings]
    assert "ATT202" in codes


def test_a_file_the_fast_tree_models_is_linted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "fixtures" / "seeds" / "seed003_review.py").read_text(encoding="utf-8")
    trees: list[bool] = []
    lint_module = engine._lint_module

    def recorded(source, rules, module, *rest):
        trees.append(isinstance(module, fast_tree.FastModule))
        return lint_module(source, rules, module, *rest)

    monkeypatch.setattr(engine, "_lint_module", recorded)
    assert len(engine.lint(Source("seed003.py", text), _CODES).findings) > 3
    assert trees == [True]


def test_the_code_of_a_node_the_fast_tree_did_not_place_sends_the_file_to_libcst() -> None:
    module = fast_tree.build("x = a < b\n")
    inner = module.body[0].body[0].value.comparisons[0]
    with pytest.raises(fast_tree.NotModelledError):
        module.code_for_node(inner)


@pytest.mark.parametrize("text", ["b, s, d = x.size( )\n", "b, s, d = (x).shape  # c\n", "b, s = [x.view( -1 )][0]\n"])
def test_a_built_node_has_libcsts_code_around_the_users_text(text: str) -> None:
    """``b, s, d = x.size()`` binds s to ``x.size()[1]``, a node facts builds on either tree."""
    exact, fast = cst.parse_module(text), fast_tree.build(text)

    def built(module: cst.Module, index: int) -> cst.Subscript:
        return cst.Subscript(module.body[0].body[0].value, [cst.SubscriptElement(cst.Index(cst.Integer(str(index))))])

    for index in range(2):
        assert fast.code_for_node(built(fast, index)) == exact.code_for_node(built(exact, index))


@st.composite
def _grouped_expressions(draw: st.DrawFn, depth: int = 0) -> str:
    """Expressions with parentheses that group (``(a) + b``), call (``f(a)``, ``(f)(a)``) or make
    a tuple, with spaces, line breaks and comments inside them."""
    if depth > 2 or draw(st.booleans()):
        found = draw(st.sampled_from(["a", "1", "x.b", "f(a)", "'s'", "None"]))
    else:
        shape = draw(st.sampled_from(["{}({})", "f({}, {})", "{}[{}]", "({}, {})", "not {}", "{} + {}", "[{}]",
                                      "{}.b", "-{}", "{} if {} else a", "lambda: {}", "{{{}: {}}}", "{}, {}",
                                      "({},)", "{}, {},", "({} for a in b)", "f({} for a in b)", "{} @ {}"]))
        found = shape.format(*(draw(_grouped_expressions(depth + 1)) for _ in range(shape.count("{}"))))
    for _ in range(draw(st.integers(0, 2))):
        inside = draw(st.sampled_from(["{}", " {} ", "\n{}\n", "{}  # c\n"]))
        found = "(" + inside.format(found) + ")"
    return found


@settings(max_examples=400, deadline=None)
@given(_grouped_expressions())
def test_code_for_node_is_libcsts_for_every_expression(expression: str) -> None:
    """Grouping parentheses are part of a node's code in libcst (its lpar/rpar), not a call's."""
    text = f"x = {expression}\n"
    try:
        exact = cst.parse_module(text)
        fast = fast_tree.build(text)
    except (cst.ParserSyntaxError, SyntaxError, fast_tree.NotModelledError, ValueError):
        return
    ours = [n for n in subtree.preorder(fast) if isinstance(n, cst.BaseExpression)]
    theirs = [n for n in subtree.preorder(exact) if isinstance(n, cst.BaseExpression)]
    assert [type(n) for n in ours] == [type(n) for n in theirs]
    for mine, libcsts in zip(ours, theirs, strict=True):
        try:
            code = fast.code_for_node(mine)
        except fast_tree.NotModelledError:
            continue
        assert code == exact.code_for_node(libcsts), type(mine).__name__
        assert fast.parenthesized(mine) == syntax.parenthesized(exact, libcsts), type(mine).__name__


@st.composite
def _fstrings(draw: st.DrawFn) -> str:
    """f-string literals: text with doubled braces, escapes and non-ASCII, and fields of every
    form (``=``, conversions, format specs holding fields) around the expressions above."""
    raw = draw(st.booleans())
    quote = draw(st.sampled_from(['"', '"""']))
    texts = ["a", " ", "{{", "}}", "é", "\\n", "\n"] + ([] if raw else ["\\N{EM DASH}"])
    pieces = []
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            pieces.append(draw(st.sampled_from(texts)))
            continue
        expression = draw(_grouped_expressions())
        form = draw(st.sampled_from(["{ %s }", "{%s!r}", "{%s:>10}", "{%s:{w}.{p}f}", "{%s=}", "{ %s = !s}"]))
        pieces.append(form % expression)
    prefix = draw(st.sampled_from(["rf", "Fr"] if raw else ["f", "F"]))
    return prefix + quote + "".join(pieces) + quote


@settings(max_examples=300, deadline=None)
@given(_fstrings(), st.sampled_from(["x = {}\n", "y = 1; x = 'é' + {}\n", "x = (\n    'a' {}\n)\n"]))
def test_fstrings_build_libcsts_tree_with_its_positions(literal: str, statement: str) -> None:
    """Inside an f-string, every expression has libcst's place and code, though 3.11's ast
    misplaces many (``{a} {a}``, parentheses, several lines)."""
    text = statement.format(literal)
    try:
        cst.parse_module(text)
        ast.parse(text)
    except (cst.ParserSyntaxError, SyntaxError, ValueError):
        return
    pairs = _pairs(text)
    exact, fast = pairs[0]
    positions = MetadataWrapper(exact, unsafe_skip_copy=True).resolve(PositionProvider)
    for theirs, mine in pairs:
        if isinstance(theirs, _PLACED):
            assert fast.positions[mine] == positions[theirs], type(mine).__name__
        if isinstance(theirs, cst.BaseExpression):
            with contextlib.suppress(fast_tree.NotModelledError):  # a generator's code (see fast_tree)
                assert fast.code_for_node(mine) == exact.code_for_node(theirs), type(mine).__name__


_NAMES = st.sampled_from(["q", "k", "v", "scores", "mask", "self.scale", "x.shape[-1]"])


@st.composite
def _expressions(draw: st.DrawFn, depth: int = 0) -> str:
    if depth > 2 or draw(st.booleans()):
        return draw(st.one_of(_NAMES, st.integers(-3, 64).map(str), st.sampled_from(["0.5", "1e-9", "None"])))
    left, right = draw(_expressions(depth + 1)), draw(_expressions(depth + 1))
    shape = draw(st.sampled_from(["({} @ {})", "({} * {})", "({} / {} ** 0.5)", "f({}, dim={})", "{}[..., :{}]",
                                  "({}, {})", "[{}, {}]", "({} if {} else 1)", "(not {} or {})", "(-{} + {})"]))
    return shape.format(left, right)


@settings(max_examples=60, deadline=None)
@given(_expressions(), _expressions())
def test_generated_expressions_build_libcsts_tree(target: str, value: str) -> None:
    text = f"def forward(self, q, k, v, mask=None, *args, scale: float = 1.0, **kw):\n    out = {value}\n" \
           f"    return {target}\n"
    _pairs(text)
