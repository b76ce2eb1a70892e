"""Which submodules a class builds (Linear, Dropout, Softmax, containers) and whether forward uses them.

Part of the analyses behind ``semantics.Semantics`` (see its docstring); it never imports torch.
"""

from __future__ import annotations

import re

import libcst as cst

from attncheck.static.analysis.flow import FlowQueries
from attncheck.static.analysis.syntax import _DROPOUT_KINDS, _NOT_PROJECTIONS, _walk_expression, name_quantity
from attncheck.static.facts import ClassFacts, FunctionFacts, self_attribute


class ModuleQueries(FlowQueries):
    """The submodule questions."""

    # -- modules -----------------------------------------------------------------

    def module_kind(self, klass: ClassFacts | None, attr: str) -> str | None:
        """The callee of ``self.attr = Callee(...)`` (either branch of a conditional), else None."""
        if klass is None:
            return None
        for value in klass.attributes.get(attr, []):
            for option in (value.body, value.orelse) if type(value) is cst.IfExp else (value,):
                if type(option) is cst.Call:
                    name = self.facts.canonical(option.func)
                    if name and not name.startswith(
                        (
                            "float",
                            "int",
                            "math.",
                            "torch.tensor",
                            "torch.zeros",
                            "torch.ones",
                            "torch.randn",
                            "torch.empty",
                        )
                    ):
                        return name
        return None

    def _is_module_container(self, klass: ClassFacts | None, attr: str) -> bool:
        kind = self.module_kind(klass, attr) or ""
        return kind.rsplit(".", 1)[-1] in {"ModuleList", "ModuleDict", "Sequential"}

    def _modules_iterated(self, fn: FunctionFacts) -> set[str]:
        """Names a ``for`` loop or comprehension of ``fn`` binds to the modules of a
        ``self.`` ModuleList (``for lin, x in zip(self.linears, inputs)``)."""
        names = self._iterated.get(id(fn))
        if names is not None:
            return names
        names = set()
        for node in _walk_expression(fn.node.body):
            if type(node) not in (cst.For, cst.CompFor):
                continue
            containers = [
                n for n in _walk_expression(node.iter)
                if (a := self_attribute(n)) is not None and self._is_module_container(fn.owner, a)
            ]
            if containers:
                names.update(n.value for n in _walk_expression(node.target) if type(n) is cst.Name)
        self._iterated[id(fn)] = names
        return names

    def is_dropout(self, klass: ClassFacts | None, attr: str) -> bool:
        kind = self.module_kind(klass, attr) or ""
        return kind.rsplit(".", 1)[-1] in _DROPOUT_KINDS

    def is_projection_module(self, klass: ClassFacts | None, attr: str) -> bool:
        """A module attribute that may project (Linear, Conv1D, 1x1 conv, Identity, custom)."""
        kind = self.module_kind(klass, attr)
        if kind is None:
            values = klass.attributes.get(attr, []) if klass is not None else []
            return any(
                self.facts.canonical(v) in {"torch.nn.Parameter", "nn.Parameter"}
                or (type(v) is cst.Call and (self.facts.canonical(v.func) or "").endswith("Parameter"))
                for v in values
            )
        short = kind.rsplit(".", 1)[-1]
        if re.match(r"(Conv|Linear|Dense)", short):
            return True  # timm's ConvNorm, ConvBnAct: a projection followed by a norm
        return not _NOT_PROJECTIONS.search(short) and short not in {"ModuleList", "ModuleDict"}

    def references_outside_init(
        self, klass: ClassFacts, attr: str
    ) -> list[tuple[FunctionFacts, cst.Attribute]]:
        """Uses of ``self.attr`` outside ``__init__``, not counting calls whose result is discarded."""
        refs = self.index.attr_refs.get((id(klass), attr), [])
        return [(fn, node) for fn, node in refs if id(node) not in self.index.bare_calls]

    def is_bare_call(self, call: cst.Call) -> bool:
        return id(call) in self.index.bare_calls

    def returns(self, fn: FunctionFacts) -> list[cst.Return]:
        return self.index.returns.get(id(fn), [])

    def has_heads(self, fn: FunctionFacts | None) -> bool:
        """Whether the code splits into several heads, so that head_dim differs from d_model.

        A head-dim name anywhere counts (``head_size`` given to a single-head class still
        differs from the model width); a head count counts only once it is stored or used,
        since ``num_heads=1`` asserted in ``__init__`` leaves one head as wide as the model.
        """
        if fn is None:
            return False
        used: set[str] = set(fn.params) | set(fn.assignments)
        declared: set[str] = set()
        if fn.owner is not None:
            used |= set(fn.owner.attributes)
            init = fn.owner.methods.get("__init__")
            declared = set(init.params) if init is not None else set()
        return any(name_quantity(n) in {"num_heads", "head_dim"} for n in used) or any(
            name_quantity(n) == "head_dim" for n in declared
        )
