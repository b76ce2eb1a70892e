"""Positions generated one top-level statement at a time are libcst's own, and a
statement's text sliced from the source is its generated code."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from attncheck.static.tree import node_fields
from attncheck.static.tree.layout import Layout

ROOT = Path(__file__).resolve().parents[2]
FILES = [*sorted((ROOT / "fixtures").rglob("*.py")), ROOT / "attncheck" / "static" / "analysis" / "patterns.py"]
TRICKY = {
    "decorators, comments between them, blank lines": (
        "# header comment\n\nimport torch\n\n\n# leading\n@a\n\n# between\n@b(\n    1,\n)\n"
        "class A:\n    x = 1\n    # footer of the body\n\n\ndef f(): pass\n"
    ),
    "semicolons and a trailing comment": "x = 1; y = 2  # two\nz = (\n    3\n)\n# end\n",
    "no trailing newline": "import math\ndef g():\n    return math.pi",
    "windows newlines": "import torch\r\n\r\nclass B:\r\n    pass\r\n",
    "tabs, one-line class, nested class": "class T:\n\tdef f(self):\n\t\treturn 1\nclass U: pass\n"
    "class V:\n    class W:\n        y = 2\n    z = 3; w = 4\n",
    "python 3.12 syntax ast rejects": "type X = int\nclass C:\n    pass\n",
}


def _cases() -> list[tuple[str, str]]:
    return [(path.name, path.read_text(encoding="utf-8")) for path in FILES] + list(TRICKY.items())


@pytest.mark.parametrize(("name", "text"), _cases(), ids=[name for name, _ in _cases()])
def test_positions_match_libcst(name: str, text: str):
    module = cst.parse_module(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    layout = Layout(module, text)
    positions = layout.positions()
    stack: list[cst.CSTNode] = list(module.body)
    order = []
    while stack:
        node = stack.pop()
        stack.extend(node_fields.children(node))
        order.append(node)
    # Innermost first, so a class's members are generated one at a time before the class.
    for node in reversed(order):
        assert positions[node] == expected[node], (name, type(node).__name__)
    assert order


def test_a_node_outside_the_tree_has_no_position():
    module = cst.parse_module("x = 1\n")
    positions = Layout(module, "x = 1\n").positions()
    assert positions.get(cst.Name("x")) is None
    with pytest.raises(KeyError):
        positions[cst.Name("x")]


def test_only_the_statements_asked_for_are_generated():
    text = "a = 1\nb = 2\nc = 3\n"
    module = cst.parse_module(text)
    positions = Layout(module, text).positions()
    assert positions[module.body[1]].start.line == 2
    assert positions.done == {(1, -1)}  # type: ignore[attr-defined]


def test_a_method_is_generated_without_the_rest_of_its_class():
    text = "class A:\n    x = 1\n\n    @staticmethod\n    def f():\n        return 2\n"
    module = cst.parse_module(text)
    positions = Layout(module, text).positions()
    method = module.body[0].body.body[1]
    assert positions[method.body.body[0]].start.line == 6
    assert positions.done == {(0, 1)}  # type: ignore[attr-defined]


def test_the_module_and_its_header_fall_back_to_the_whole_module():
    text = "# comment\n\nx = 1\n"
    module = cst.parse_module(text)
    positions = Layout(module, text).positions()
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    assert positions[module] == expected[module]
    assert positions[module.header[0]] == expected[module.header[0]]
