"""ATT301 multiplicative-mask: a mask must push blocked scores to -inf, not to 0."""

from __future__ import annotations

import libcst as cst

from attncheck.static.analysis import semantics, syntax
from attncheck.static.rule import Invalid, Rule

_HINT = "fill the blocked scores before the softmax: scores = scores.masked_fill(mask == 0, float('-inf'))"

_FN = """
import math, torch, torch.nn.functional as F
def attention(q, k, v, mask):
    '''q, k, v: (batch, heads, seq, head_dim); mask: 1 = keep, 0 = blocked.'''
    scores = {scores}
    {line}
    return F.softmax(scores, dim=-1) @ v
"""


def _fn(line: str, scores: str = "q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))") -> str:
    return _FN.replace("{scores}", scores).replace("{line}", line)


class MultiplicativeMask(Rule):
    code = "ATT301"
    PREFILTER = ("mask", "tril", "triu")
    VALID = (
        _fn("scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)"),
        _fn("scores = scores + (1.0 - mask) * -10000.0"),
        _fn("scores = scores + torch.where(mask.bool(), 0.0, float('-inf'))"),
        _fn("scores = scores + (1 - mask.float()) * torch.finfo(scores.dtype).min"),
        _fn("scores = scores * mask - 1e4 * (1 - mask)"),
        "import torch\ndef attention(q, k, attention_mask):\n"
        "    return torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / 8 + attention_mask, dim=-1)",
    )
    INVALID = (
        Invalid(_fn("scores = scores * mask"), line=6, message="multiplied"),
        Invalid(_fn("", scores="mask * torch.matmul(q, k.transpose(-2, -1)) / 8"), line=5),
        Invalid(_fn("scores = torch.mul(scores, mask)"), line=6),
        Invalid(_fn("scores = scores + mask"), line=6, message="0/1"),
        Invalid(
            _fn("causal = torch.tril(torch.ones(q.size(2), q.size(2)))\n    scores = scores + causal"),
            line=7,
            message="tril",
        ),
        Invalid(
            "import torch\ndef f(q, k, v):\n    s = torch.einsum('bhqd,bhkd->bhqk', q, k) / 8\n"
            "    keep = s.new_ones(s.shape[-2:]).tril() > 0\n"
            "    return torch.softmax(s * keep, dim=-1) @ v",
            line=5,
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        sem = semantics.of(self.context)
        fn = self.context.function
        softmax = sem.softmax(node, fn)
        if softmax is None:
            return
        pipeline = sem.pipeline(softmax, fn)
        if pipeline is None:
            return
        for use in pipeline.masks:
            shown = sem.code(use.mask)
            if use.how == "multiplied":
                self.report(
                    syntax.located(self, use.node, node),
                    f"mask {shown} is multiplied into the scores: blocked keys get score 0, "
                    "and exp(0) still gives them weight after the softmax",
                    hint=_HINT,
                    evidence=[e for e in (use.binary, use.additive) if e],
                )
            elif use.binary and not use.additive:
                self.report(
                    syntax.located(self, use.node, node),
                    f"a 0/1 mask is added to the scores ({use.binary}): adding 1 to kept keys "
                    "blocks nothing; convert it to an additive mask (0 / -inf) first",
                    hint=_HINT,
                    evidence=[use.binary],
                )
