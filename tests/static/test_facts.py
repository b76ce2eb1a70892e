"""FileFacts: import aliases, and canonical names kept once computed."""

from __future__ import annotations

import libcst as cst
import pytest

from attncheck.static.facts import FileFacts, number_value
from attncheck.static.tree import fast_tree, subtree

_TEXT = """\
class Early(pl.LightningModule):
    def forward(self, x):
        return F.softmax(x, dim=-1) + pl.seed(1)

import lightning as pl
"""


@pytest.mark.parametrize("parse", [fast_tree.build, cst.parse_module], ids=["fast tree", "libcst"])
def test_canonical_names_expand_aliases_and_keep_their_answer(parse) -> None:
    module = parse(_TEXT)
    facts = FileFacts(module)
    softmax, seed = (call.func for call in facts.functions[0].calls)
    assert facts.canonical(softmax) == "torch.nn.functional.softmax"  # a default alias
    assert facts.canonical(seed) == "lightning.seed"  # imported below the use: the file's alias
    assert facts.canonical(seed) is facts.canonical(seed)  # kept, not worked out again
    assert facts.canonical(cst.Name("torch")) == "torch"


@pytest.mark.parametrize("parse", [fast_tree.build, cst.parse_module], ids=["fast tree", "libcst"])
def test_class_bases_are_read_with_the_imports_above_the_class(parse) -> None:
    """The index reads bases as it meets the class; asking later does not see that early answer."""
    module = parse(_TEXT)
    facts = FileFacts(module)
    base = module.body[0].bases[0].value
    assert facts.classes["Early"].bases == ("pl.LightningModule",)
    assert facts.canonical(base) == "lightning.LightningModule"


def test_number_value_reads_every_spelling_as_python_does() -> None:
    literals = ["0", "00", "7", "1_000", "0x1F", "0o17", "0b101", "1.5", ".5", "1.", "1e-9", "1_0e1_0", "1e400"]
    for parse in (cst.parse_module, fast_tree.build):
        module = parse("x = [" + ", ".join(literals) + "]\n")
        found = [n for n in subtree.preorder(module) if type(n) in (cst.Integer, cst.Float)]
        assert [number_value(n) for n in found] == [float(n.evaluated_value) for n in found]
        assert len(found) == len(literals)
