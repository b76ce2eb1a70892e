"""The gradients probe: does every parameter of a module reach its output?

The plain run of a class backpropagates its output against a random cotangent and the child
reports each parameter's gradient norm (None when the parameter got none). A parameter that
gets no gradient is defined and never used (ATT907): a projection built and skipped, a bias
that is never added. A backward that raises because the forward changed in place a tensor
autograd needs (``attn /= s`` on the softmax's output) is a module that cannot be trained, for
any input (ATT901); the child then judged its values without gradients.
"""

from __future__ import annotations

from attncheck.dynamic import codes
from attncheck.dynamic.binding.bind import Binding
from attncheck.dynamic.probes.base import FunctionProbe, JudgeView, Outcome, plans_nothing
from attncheck.findings import Check


def wanted(binding: Binding) -> bool:
    """A class: a function has no parameters of its own."""
    return binding.target.is_class


def judge(view: JudgeView) -> list[Outcome]:
    """gradients, for a class."""
    if not wanted(view.binding):
        return []
    grads = view.facts.get("grads")
    broken = view.facts.get("backward_error")
    if broken:
        message = broken.get("message", "").split(" Hint:")[0]
        return [(
            Check("gradients", "failed", f"backward raises {broken.get('type')}: {message}"),
            codes.FORWARD_CRASH,
            f"backward raises {broken.get('type')}: {message}: the module cannot be trained "
            "(its values were judged without gradients)",
        )]
    if view.facts.get("no_grad"):
        return [(Check("gradients", "skipped", view.facts["no_grad"]), None, "")]
    if grads is None:
        return [(Check("gradients", "skipped", "backward did not run"), None, "")]
    if not grads:
        return [(Check("gradients", "skipped", "no parameters"), None, "")]
    unused = [name for name, norm in grads.items() if norm is None]
    detail = ", ".join(f"{n}: {'none' if g is None else f'{g:.3g}'}" for n, g in grads.items())
    if not unused:
        return [(Check("gradients", "passed", f"every parameter gets a gradient ({detail})"), None, "")]
    return [(
        Check("gradients", "failed", detail),
        codes.UNUSED_PARAMETER,
        f"parameter(s) {', '.join(unused)} get no gradient from the output",
    )]


PROBE = FunctionProbe("gradients", (codes.UNUSED_PARAMETER, codes.FORWARD_CRASH), 5, wanted, plans_nothing, judge)
