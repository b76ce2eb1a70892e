"""Import names read by the regular expression match what a parse says, and the rest is parsed."""

from __future__ import annotations

import pytest

from attncheck.static.tree.import_names import _PLAIN, _parsed_bound_names, bound_names

PLAIN = {
    "import torch\n": {"torch"},
    "import torch.nn.functional as F  # noqa\n\n# a comment\n\n": {"F"},
    "import os, torch.nn as nn, numpy\n": {"os", "nn", "numpy"},
    "from torch import nn\n": {"nn"},
    "from . import configuration\n": {"configuration"},
    "from ...utils import (\n    auto_docstring,\n    logging as log,\n)\n": {"auto_docstring", "log"},
    "from .modeling import(A, B)\n": {"A", "B"},
    "from __future__ import annotations\n": {"annotations"},
}

NOT_PLAIN = [
    "from foo import *\n",
    "import a; import b\n",
    "from x import (\n    a,  # why\n    b,\n)\n",
    "from x import a, \\\n    b\n",
    "try:\n    import flash_attn\nexcept ImportError:\n    pass\n",
    "from x import a,\n",
    "from x import ()\n",
    "import class\n",
    "from x import a as b as c\n",
    "import_structure = {'a': ['b']}\n",
]


@pytest.mark.parametrize("block", PLAIN)
def test_plain_imports_are_read_without_a_parse_and_agree_with_it(block):
    assert _PLAIN.fullmatch(block) is not None
    assert bound_names(block) == PLAIN[block] == _parsed_bound_names(block)


@pytest.mark.parametrize("block", NOT_PLAIN)
def test_anything_else_gets_what_the_parse_says(block):
    expected = _parsed_bound_names(block)
    assert bound_names(block) == (frozenset(expected) if expected is not None else None)


def test_a_star_import_or_more_than_imports_is_kept():
    assert bound_names("from foo import *\n") is None
    assert bound_names("try:\n    import flash_attn\nexcept ImportError:\n    pass\n") is None
