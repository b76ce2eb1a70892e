"""ATT202 softmax-dim: attention weights are normalised over the key axis, the last one."""

from __future__ import annotations

import libcst as cst

from attncheck.findings import Edit, Severity
from attncheck.static import edits
from attncheck.static.analysis import semantics, syntax
from attncheck.static.analysis.results import Pipeline, Softmax
from attncheck.static.analysis.syntax import number
from attncheck.static.facts import whole_number
from attncheck.static.rule import Invalid, Rule

_HINT = "normalise over the keys: softmax(scores, dim=-1)"
_AXES = {4: ("batch", "heads", "queries", "keys"), 3: ("batch", "queries", "keys"), 2: ("queries", "keys")}

_HEADS = """
import torch, torch.nn as nn, torch.nn.functional as F
def attend(x, wq, wk, h):
    b, s, d = x.shape
    q = (x @ wq).view(b, s, h, d // h).transpose(1, 2)
    k = (x @ wk).view(b, s, h, d // h).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / (d // h) ** 0.5
    {line}
"""


def _heads(line: str) -> str:
    return _HEADS.replace("{line}", line)


class SoftmaxDim(Rule):
    code = "ATT202"
    PREFILTER = ("softmax", "Softmax")
    VALID = (
        _heads("return F.softmax(scores, dim=-1)"),
        _heads("return torch.softmax(scores, 3)"),
        _heads("return scores.softmax(dim=-1)"),
        _heads("return nn.Softmax(dim=-1)(scores)"),
        "import torch\ndef f(q, k):\n    return torch.softmax(torch.bmm(q, k.transpose(1, 2)) / 8, dim=2)",
        "import torch\ndef f(logits):\n    return torch.softmax(logits, dim=1)",
        # dual-softmax matching (LoFTR): both axes of a similarity matrix, on purpose.
        "import torch.nn.functional as F\ndef match(f0, f1, temperature):\n"
        "    sim = f0 @ f1.transpose(-1, -2) / temperature\n"
        "    return F.softmax(sim, 1) * F.softmax(sim, 2)",
        # the key axis l is second in the einsum's output (x-transformers' multi-view readout).
        "from torch import einsum\ndef f(query, keys, scale):\n"
        "    logits = einsum('v b ... d, l b ... d -> v l b ...', query, keys) * scale\n"
        "    return logits.softmax(dim = 1)",
        # the Set Transformer's MAB: the tensor method ``.bmm`` makes 3-D scores, whose keys are dim 2.
        "import torch\ndef f(Q_, K_, dim_split):\n"
        "    return torch.softmax(Q_.bmm(K_.transpose(1, 2)) / dim_split ** 0.5, 2)",
    )
    INVALID = (
        Invalid(_heads("return torch.softmax(scores, dim=(2, 3))"), line=8, message="tuple"),
        Invalid(_heads("return F.softmax(scores, dim=-2)"), line=8, message="queries"),
        Invalid(_heads("return scores.softmax(1)"), line=8, message="heads"),
        Invalid(_heads("return nn.Softmax(dim=2)(scores)"), line=8, message="queries"),
        Invalid(_heads("return F.softmax(scores)"), line=8, message="implicit"),
        Invalid(
            "import torch\ndef f(q, k):\n    s = torch.einsum('bqd,bkd->bqk', q, k) / 8\n"
            "    return torch.softmax(s, dim=1)",
            line=4,
            fixed="import torch\ndef f(q, k):\n    s = torch.einsum('bqd,bkd->bqk', q, k) / 8\n"
            "    return torch.softmax(s, dim=-1)",
        ),
        Invalid("import torch\ndef f(x):\n    return torch.softmax(x, dim=(1, 2))", line=3),
    )

    def visit_Call(self, node: cst.Call) -> None:
        sem = semantics.of(self.context)
        fn = self.context.function
        softmax = sem.softmax(node, fn)
        if softmax is None:
            return
        dim = softmax.dim
        if dim is not None:
            resolved = sem.facts.resolve(dim, fn)
            dim = (
                resolved
                if number(resolved) is not None or isinstance(resolved, (cst.Tuple, cst.List))
                else dim
            )
        if isinstance(dim, (cst.Tuple, cst.List)):
            self.report(
                node,
                f"{softmax.where} is given a tuple of dims ({sem.code(dim)}): softmax takes one "
                "dim and raises TypeError; normalise over the key axis only",
                hint=_HINT,
                fix=self._fix(softmax),
            )
            return
        pipeline = sem.pipeline(softmax, fn)
        if pipeline is None or not pipeline.products or _transposed_scores(pipeline):
            return
        if sem.dual_softmax(softmax, fn):
            return
        if not softmax.has_dim:
            self._missing_dim(softmax, pipeline)
        elif dim is not None and (axis := whole_number(number(dim))) is not None \
                and not _einsum_key_axis(pipeline, axis):
            self._wrong_dim(softmax, pipeline, axis)

    def _missing_dim(self, softmax: Softmax, pipeline: Pipeline) -> None:
        rank = pipeline.rank
        if rank == 2:
            return
        implicit = 0 if rank in (3, None) else 1
        axes = _AXES.get(rank or 0)
        over = f"dim={implicit}, the {axes[implicit]} axis" if axes else "an implicit dim"
        self.report(
            softmax.call,
            f"{softmax.where} has no dim: the implicit (deprecated) dim is {over}, not the keys",
            severity=None if rank else Severity.WARNING,
            hint=_HINT,
            fix=self._fix(softmax),
        )

    def _wrong_dim(self, softmax: Softmax, pipeline: Pipeline, dim: int) -> None:
        rank = pipeline.rank
        if dim == -1:
            return
        if rank is None:
            if dim == -2:
                self.report(
                    softmax.call,
                    f"{softmax.where} over dim=-2 normalises over the queries, "
                    "not the keys (the last axis of q·kᵀ)",
                    hint=_HINT,
                    fix=self._fix(softmax),
                )
            elif dim >= 0:
                self.report(
                    softmax.call,
                    f"{softmax.where} over dim={dim} is the key axis only for "
                    f"{dim + 1}-D scores; the keys are the last axis of q·kᵀ",
                    severity=Severity.WARNING,
                    hint=_HINT,
                    fix=self._fix(softmax),
                )
            return
        index = dim + rank if dim < 0 else dim
        if index == rank - 1:
            return
        axes = _AXES.get(rank)
        name = axes[index] if axes and 0 <= index < len(axes) else "a missing"
        self.report(
            softmax.call,
            f"{softmax.where} over dim={dim} normalises over the {name} axis of the "
            f"{rank}-D scores, not the keys",
            hint=_HINT,
            fix=self._fix(softmax),
        )

    def _fix(self, softmax: Softmax) -> tuple[Edit, ...]:
        """``dim=-1`` in the call, or in the ``nn.Softmax(...)`` constructor for a module.

        A keyword dim keeps its spelling and gets the value -1; a positional dim
        becomes ``dim=-1`` when nothing positional follows it (else just -1); a
        missing dim is added after the last argument. Calls with ``*args`` or
        ``**kwargs`` get no fix: the dim may hide in them.
        """
        holder = softmax.module or softmax.call
        if any(arg.star for arg in holder.args):
            return ()
        if softmax.dim is None:
            if holder.args:
                return edits.complete(edits.insert_after(self, holder.args[-1], ", dim=-1"))
            return edits.complete(edits.insert_in_parentheses(self, holder, "dim=-1"))
        index = next((i for i, a in enumerate(holder.args) if a.value is softmax.dim), None)
        if index is None:
            return ()
        arg = holder.args[index]
        if arg.keyword is not None and not syntax.parenthesized(self.context.module, softmax.dim):
            return edits.complete(edits.replace(self, softmax.dim, "-1"))
        last_positional = all(a.keyword is not None for a in holder.args[index + 1 :])
        return edits.complete(edits.replace(self, arg, "dim=-1" if last_positional else "-1"))


def _einsum_key_axis(pipeline: Pipeline, dim: int) -> bool:
    """Every product is an einsum whose output puts the key axis at ``dim`` (x-transformers'
    ``einsum('v b ... d, l b ... d -> v l b ...')`` normalised over dim=1)."""
    axes = []
    for product in pipeline.products:
        spec = syntax.string_value(product.args[0].value) if isinstance(product, cst.Call) and product.args \
            else None
        axes.append(syntax.einsum_key_axis(spec) if spec else None)
    return bool(axes) and all(axis is not None and dim in axis for axis in axes)


def _transposed_scores(pipeline: Pipeline) -> bool:
    """``k @ q.T``: scores laid out (keys, queries), where dim=-2 is right."""
    left = pipeline.operands[0] if pipeline.operands else None
    code = left.value if isinstance(left, cst.Name) else ""
    return code.lower() in {"k", "key", "keys", "k_t"}
