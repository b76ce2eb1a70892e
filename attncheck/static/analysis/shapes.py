"""Which axis or size a number or tensor is (head dim, heads, sequence length), a tensor's rank, and what is a scalar.

Part of the analyses behind ``semantics.Semantics`` (see its docstring); it never imports torch.
"""

from __future__ import annotations

import libcst as cst

from attncheck.static.analysis.modules import ModuleQueries
from attncheck.static.analysis.patterns import method_name
from attncheck.static.analysis.results import Quantity
from attncheck.static.analysis.syntax import (
    _HEAD_COUNT,
    _SCALE_NAME,
    _SHAPE_KEEPING,
    _count_axes,
    _shape_args,
    _walk_expression,
    keyword,
    name_quantity,
    number,
    positional,
    rearrange_sides,
    string_value,
)
from attncheck.static.facts import ClassFacts, FileFacts, FunctionFacts, dotted_name, self_attribute, whole_number


def _keeps_channels(call: cst.Call, facts: FileFacts) -> bool:
    """An einops rearrange of four axes that keeps the second whole and groups the last two:
    ``'b c h w -> b (h w) c'``, ``'b c h w -> b c (h w)'``."""
    sides = rearrange_sides(call, facts)
    if sides is None or "(" in sides[0]:
        return False
    axes = sides[0].split()
    right = " ".join(sides[1].replace("(", " ( ").replace(")", " ) ").split())
    return len(axes) == 4 and f"( {axes[2]} {axes[3]} )" in right and f" {axes[1]} " in f" {right} "


class ShapeQueries(ModuleQueries):
    """The axis, size and rank questions."""

    # -- quantities --------------------------------------------------------------

    def quantity(
        self,
        expr: cst.BaseExpression,
        fn: FunctionFacts | None,
        operands: frozenset[str] = frozenset(),
        depth: int = 0,
    ) -> Quantity | None:
        """What dimension a Python number is, with the evidence; None when unknown."""
        if depth > 6:
            return None
        name = expr.value if type(expr) is cst.Name else self_attribute(expr)
        if name is not None:
            unpacked = self.index.unpacks.get((id(fn), name)) if type(expr) is cst.Name and fn else None
            if unpacked is not None and len(fn.assignments.get(name, [])) == 1:
                source, position, arity = unpacked
                kind = self._axis_of_shape(source, position, arity, fn, operands)
                if kind is not None:
                    return Quantity(kind, f"{name} = {self.code(source)}[{position}]")
            hop = self.single(expr, fn)
            if hop is not None:
                found = self.quantity(hop[0], hop[1], operands, depth + 1)
                if found is not None:
                    return Quantity(found.kind, f"{self.code(expr)} = {self.code(hop[0])}")
            kind = name_quantity(name)
            if kind == "d_model" and self._times_heads(expr, fn):
                return Quantity("head_dim", f"{self.code(expr)} (times the head count it is a projection's width)")
            heads = self._heads_dividing(expr, fn) if kind is None else None
            if heads is not None:
                return Quantity("d_model", f"{self.code(expr)} = the width split by {self.code(expr)} // {heads}")
            return Quantity(kind, self.code(expr)) if kind else None
        if type(expr) is cst.Call:
            func = self.facts.canonical(expr.func) or ""
            args = positional(expr)
            if func in {"int", "float", "math.floor", "math.ceil", "round"} and len(args) == 1:
                return self.quantity(args[0], fn, operands, depth + 1)
            if method_name(expr) == "size" and type(expr.func) is cst.Attribute:
                dim = args[0] if args else keyword(expr, "dim")
                index = whole_number(number(dim)) if dim is not None else None
                if index is not None:
                    kind = self._axis_of_tensor(expr.func.value, index, None, fn, operands)
                    return Quantity(kind, self.code(expr)) if kind else None
            return None
        if type(expr) is cst.Subscript and len(expr.slice) == 1:
            element = expr.slice[0].slice
            index = whole_number(number(element.value)) if type(element) is cst.Index else None
            base = expr.value
            if index is not None and self._is_shape(base):
                tensor = base.value if type(base) is cst.Attribute else base.func.value  # type: ignore[union-attr]
                kind = self._axis_of_tensor(tensor, index, None, fn, operands)
                return Quantity(kind, self.code(expr)) if kind else None
            return None
        if type(expr) is cst.BinaryOperation and type(expr.operator) in (cst.FloorDivide, cst.Divide):
            left = self.quantity(expr.left, fn, operands, depth + 1)
            right = self.quantity(expr.right, fn, operands, depth + 1)
            if right and right.kind == "num_heads" and (left is None or left.kind == "d_model"):
                return Quantity("head_dim", self.code(expr))
        return None

    def _times_heads(self, expr: cst.BaseExpression, fn: FunctionFacts | None) -> bool:
        """A width named like the model's that the class multiplies by a head count
        (ESMFold's ``self.hidden_dim = config.ipa_dim`` with ``config.ipa_dim *
        config.num_heads_ipa`` as the projection width): it is the width of one head."""
        owner = fn.owner if fn is not None else None
        if owner is None:
            return False
        spellings = {self.code(expr)} | {self.code(v) for v, _ in self.values(expr, fn)}
        return any(
            (left in spellings and _HEAD_COUNT.search(right)) or (right in spellings and _HEAD_COUNT.search(left))
            for left, right in self._operations(owner, cst.Multiply)
        )

    def _heads_dividing(self, expr: cst.BaseExpression, fn: FunctionFacts | None) -> str | None:
        """The head count by which the class divides a width of no conventional name (``self.feats //
        self.heads`` as a view's size), which makes it the model width whatever it is called; else None."""
        owner = fn.owner if fn is not None else None
        if owner is None:
            return None
        divided = self._operations(owner, cst.FloorDivide)
        if not divided:
            return None  # most classes: no floor division, so no code to generate for ``expr``
        spelled = self.code(expr)  # a local bound to it is followed by ``quantity``'s own hop
        heads = (right for left, right in divided if left == spelled)
        return next((right for right in heads if name_quantity(right.rsplit(".", 1)[-1]) == "num_heads"), None)

    def _operations(self, owner: ClassFacts, operator: type[cst.BaseBinaryOp]) -> list[tuple[str, str]]:
        """Every ``a * b`` or ``a // b`` (``operator``) in the class's methods, as the code of both
        sides: one walk of the class gives both, built once."""
        found = self._products.get(id(owner))
        if found is None:
            found = {cst.Multiply: [], cst.FloorDivide: []}
            for method in owner.methods.values():
                for node in _walk_expression(method.node.body):
                    if type(node) is cst.BinaryOperation and type(node.operator) in found:
                        found[type(node.operator)].append((self.code(node.left), self.code(node.right)))
            self._products[id(owner)] = found
        return found[operator]

    @staticmethod
    def _is_shape(node: cst.BaseExpression) -> bool:
        if type(node) is cst.Attribute and node.attr.value == "shape":
            return True
        return type(node) is cst.Call and method_name(node) == "size" and not node.args

    def _axis_of_shape(
        self,
        source: cst.BaseExpression,
        position: int,
        arity: int | None,
        fn: FunctionFacts,
        operands: frozenset[str],
    ) -> str | None:
        if not self._is_shape(source):
            return None
        tensor = source.value if type(source) is cst.Attribute else source.func.value  # type: ignore[attr-defined]
        if arity == 4 and self._flattens_image(tensor, source, fn):
            # VQ-GAN attention: ``b, c, h, w = q.shape`` then ``q.reshape(b, c, h * w)``:
            # one head whose width is the channel count, over h * w positions.
            return {0: "batch", 1: "head_dim", 2: "seq_len", 3: "seq_len"}.get(position)  # h * w positions
        if arity == 3 and self._channels_first(source):
            # ``batch, channels, seq_len = q.shape`` of a Conv1d's output (WavTokenizer's Vocos
            # attention): the names put the features before the positions.
            return {0: "batch", 1: "d_model", 2: "seq_len"}.get(position)
        return self._axis_of_tensor(tensor, position, arity, fn, operands)

    def _channels_first(self, shape: cst.BaseExpression) -> bool:
        """The three names ``shape`` is unpacked into call its last axis the sequence, and not
        its middle one: a (batch, channels, length) tensor, whatever (b, s, d) layout its rank
        would suggest."""
        names = self.index.unpack_names.get(id(shape), ())
        kinds = [name_quantity(name) if name is not None else None for name in names]
        return len(kinds) == 3 and kinds[2] == "seq_len" and kinds[1] != "seq_len"

    def _flattens_image(self, tensor: cst.BaseExpression, shape: cst.BaseExpression, fn: FunctionFacts) -> bool:
        """``tensor`` (unpacked from ``shape`` as b, c, h, w) is flattened to (b, c, h * w):
        ``reshape(b, c, h * w)``, ``reshape(b, c, -1)``, ``x.flatten(2)``, ``torch.flatten(x, 2)``
        or einops' ``'b c h w -> b (h w) c'``. An image whose channels stay whole (one head as wide as
        the channels, LDM's SpatialSelfAttention), not a (batch, heads, seq, head_dim) tensor."""
        if type(tensor) is not cst.Name:
            return False

        def unpacked_at(expr: cst.BaseExpression) -> int | None:
            found = self.index.unpacks.get((id(fn), expr.value)) if type(expr) is cst.Name else None
            return found[1] if found is not None and found[0] is shape else None

        def is_tensor(expr: cst.BaseExpression) -> bool:
            """The image itself, or the module's projection of it (``self.q(x)``: a 1x1 convolution
            keeps its (b, c, h, w) layout)."""
            if type(expr) is cst.Name:
                return expr.value == tensor.value
            return (
                type(expr) is cst.Call and self_attribute(expr.func) is not None
                and any(type(a) is cst.Name and a.value == tensor.value for a in positional(expr)[:1])
            )

        for call in fn.calls:
            method = method_name(call)
            if method in {"view", "reshape"} and is_tensor(call.func.value):  # type: ignore[attr-defined]
                args = _shape_args(call)
                if len(args) == 3 and unpacked_at(args[1]) == 1 and (
                    number(args[2]) == -1
                    or (type(args[2]) is cst.BinaryOperation
                    and type(args[2].operator) is cst.Multiply
                    and {unpacked_at(args[2].left), unpacked_at(args[2].right)} == {2, 3})
                ):
                    return True
            elif method == "flatten":
                args = positional(call)
                if self.facts.canonical(call.func) == "torch.flatten" and args:
                    flattened, args = args[0], args[1:]  # ``torch.flatten(x, 2)``
                else:
                    flattened = call.func.value  # type: ignore[attr-defined]
                start = args[0] if args else keyword(call, "start_dim")
                if is_tensor(flattened) and start is not None and number(start) == 2:
                    return True
            elif method is None and _keeps_channels(call, self.facts) and is_tensor(positional(call)[0]):
                return True
        return False

    def _axis_of_tensor(
        self,
        tensor: cst.BaseExpression,
        index: int,
        arity: int | None,
        fn: FunctionFacts | None,
        operands: frozenset[str],
    ) -> str | None:
        """Which axis ``tensor.shape[index]`` is, from the tensor's rank and role."""
        evident = self.rank(tensor, fn)
        rank = arity or evident
        # ``b, s, d = q.shape`` before ``q`` is split into heads: a (batch, seq, d_model) view of
        # it. The split comes later, so every value of the name counts here, reachable or not.
        widest = evident
        if type(tensor) is cst.Name and fn is not None:
            later = [self.rank(v, fn) for v in fn.assignments.get(tensor.value, [])]
            widest = max((r for r in [evident, *later] if r is not None), default=None)
        pre_split = arity is not None and widest is not None and arity < widest
        if rank is not None and index < 0:
            index += rank
        name = dotted_name(tensor) or ""
        if rank == 4:
            return {0: "batch", 1: "num_heads", 2: "seq_len", 3: "head_dim"}.get(index)
        if name in operands and not pre_split:
            if index == -1 or (rank == 3 and index == 2):
                return "head_dim"
            return "seq_len" if index == -2 or (rank == 3 and index == 1) else None
        raw = pre_split or self.is_raw_input(tensor, fn)
        if rank == 3 or (rank is None and raw):
            if index == 1:
                return "seq_len"
            if index == 0:
                return "batch"
            if raw and index in (2, -1):
                return "d_model"
        return None

    def is_raw_input(self, tensor: cst.BaseExpression, fn: FunctionFacts | None) -> bool:
        """A forward parameter that this function projects or splits: a (batch, seq, d_model) input."""
        if not self.is_param(tensor, fn) or fn is None:
            return False
        name = tensor.value  # type: ignore[attr-defined]
        for call in fn.calls:
            receiver = call.func.value if type(call.func) is cst.Attribute else None
            if (
                type(receiver) is cst.Name
                and receiver.value == name
                and method_name(call) in {"view", "reshape", "unflatten"}
            ):
                return True
            projects = (
                self_attribute(call.func) or self.facts.canonical(call.func) == "torch.nn.functional.linear"
            )
            if projects and any(type(a) is cst.Name and a.value == name for a in positional(call)[:1]):
                return True
        return False

    # -- ranks -------------------------------------------------------------------

    def rank(self, expr: cst.BaseExpression, fn: FunctionFacts | None, depth: int = 0) -> int | None:
        """The tensor rank an expression evidently has (from view/reshape/rearrange), or None."""
        if depth > 8:
            return None
        if type(expr) in (cst.Name, cst.Attribute) and (
            type(expr) is cst.Name or self_attribute(expr)
        ):
            found = [self.rank(v, f, depth + 1) for v, f in self.values(expr, fn)]
            known = [r for r in found if r is not None]
            return max(known) if known else None
        if type(expr) is cst.Subscript:
            inner = self.rank(expr.value, fn, depth + 1)
            value = expr.value
            if type(value) is cst.Call and method_name(value) in {"chunk", "split", "tensor_split"}:
                return inner
            element = expr.slice[0].slice if len(expr.slice) == 1 else None
            if inner is not None and type(element) is cst.Index and number(element.value) is not None:
                return inner - 1
            return inner
        if type(expr) is cst.BinaryOperation:
            sides = [self.rank(expr.left, fn, depth + 1), self.rank(expr.right, fn, depth + 1)]
            known = [r for r in sides if r is not None]
            return max(known) if known else None
        if type(expr) is not cst.Call:
            return None
        return self._call_rank(expr, fn, depth)

    def _call_rank(self, call: cst.Call, fn: FunctionFacts | None, depth: int) -> int | None:
        method = method_name(call)
        func = self.facts.canonical(call.func) or ""
        args = positional(call)
        if method in {"view", "reshape"} and not func.startswith("torch."):
            if any(a.star for a in call.args):
                return None
            if len(args) == 1 and type(args[0]) in (cst.Tuple, cst.List):
                return len(args[0].elements)
            return len(args) if len(args) > 1 else None
        if method == "permute" and len(args) > 1:
            return len(args)
        if func.endswith("rearrange") and len(args) >= 2:
            pattern = string_value(args[1])
            if pattern and "->" in pattern:
                return _count_axes(pattern.split("->")[1])
        if func == "torch.einsum" and args:
            spec = string_value(args[0])
            if spec and "->" in spec and "..." not in spec.split("->")[1]:  # ``...`` hides the rank
                return len(spec.split("->")[1].replace(" ", ""))
        if func in ("torch.bmm", "torch.baddbmm") or (
            method in ("bmm", "baddbmm") and not func.startswith("torch.")  # ``q.bmm(k)``, ``bias.baddbmm(q, k)``
        ):
            return 3
        if method in {"unsqueeze"} and type(call.func) is cst.Attribute:
            inner = self.rank(call.func.value, fn, depth + 1)
            return inner + 1 if inner is not None else None
        if method == "unbind" and type(call.func) is cst.Attribute:
            inner = self.rank(call.func.value, fn, depth + 1)
            return inner - 1 if inner is not None else None
        if func == "torch.matmul" and len(args) == 2:
            sides = [r for r in (self.rank(a, fn, depth + 1) for a in args) if r is not None]
            return max(sides) if sides else None
        if (method in _SHAPE_KEEPING or method in {"chunk", "split"}) and isinstance(
            call.func, cst.Attribute
        ):
            return self.rank(call.func.value, fn, depth + 1)
        if self_attribute(call.func) and args:
            return self.rank(args[0], fn, depth + 1)
        return None

    def is_scalar(self, expr: cst.BaseExpression, fn: FunctionFacts | None, depth: int = 0) -> bool:
        """A Python or 0-d scale factor rather than a tensor (mask, cos, sin)."""
        if depth > 6:
            return False
        name = expr.value if type(expr) is cst.Name else self_attribute(expr)
        if name is not None:
            if _SCALE_NAME.search(name) or name_quantity(name):
                return True
            hop = self.single(expr, fn)
            return hop is not None and self.is_scalar(hop[0], hop[1], depth + 1)
        if type(expr) is cst.Attribute and _SCALE_NAME.search(expr.attr.value):
            return True  # a sub-module's scale: diffusers' ``query * self.attn.scale``
        if number(expr) is not None or self.quantity(expr, fn) is not None:
            return True
        if type(expr) is cst.Subscript:
            return self._is_shape(expr.value)
        if type(expr) is cst.BinaryOperation:
            if type(expr.operator) is cst.Power:
                return number(expr.right) is not None and self.is_scalar(expr.left, fn, depth + 1)
            return self.is_scalar(expr.left, fn, depth + 1) and self.is_scalar(expr.right, fn, depth + 1)
        if type(expr) is cst.Call:
            func = self.facts.canonical(expr.func) or ""
            method = method_name(expr)
            if func.startswith("math.") or func in {
                "float",
                "int",
                "torch.tensor",
                "torch.sqrt",
                "torch.rsqrt",
                "np.sqrt",
                "numpy.sqrt",
            }:
                return all(self.is_scalar(a, fn, depth + 1) for a in positional(expr)[:1])
            if method == "size":
                return True
            if method in {"sqrt", "rsqrt", "float", "item", "to", "type", "half", "double", "bfloat16"} and isinstance(
                expr.func, cst.Attribute
            ):  # DeBERTa's ``query_layer / scale.to(dtype=query_layer.dtype)``
                return self.is_scalar(expr.func.value, fn, depth + 1)
        return False
