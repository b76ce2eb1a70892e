"""The compiled-run probe: with ``compile = true``, torch.compile'd code is checked compiled, once.

Every forward of code that loads Dynamo runs under ``force_eager``: the same score and mask
functions, evaluated eagerly, because compiling flex_attention for the CPU takes 15-35 s a shape
(``bench/flex_compile.py``) against 3 s a module, and refuses float64. The compiled kernel's own
numbers stay unchecked unless the user asks (``compile = true`` in ``[tool.attncheck]``): then one
more run of the plain inputs takes the compiled path, in float32, and its output is held to the
float64 reference that explains the plain run, with the float32 tolerance. Where the module holds
no compiled callable the run does not happen and there is no check.

Compiling starts a compiler process (Inductor's C++ build on the CPU, Triton's ``ptxas`` on a GPU),
which the child's seccomp filter refuses (``harness/confine.py``: no new processes): in the
sandbox the check is skipped, saying so. It runs where the module runs unconfined, as in the
in-process test (``tests/test_dynamic_probes_compiled_run.py``, opt-in, slow).
"""

from __future__ import annotations

from attncheck.dynamic import codes
from attncheck.dynamic.binding.bind import Binding
from attncheck.dynamic.probes.base import FunctionProbe, JudgeView, Outcome, Planner, outcome
from attncheck.dynamic.probes.declared_run import NOT_DECLARED, unjudged
from attncheck.dynamic.reference.tolerance import max_error
from attncheck.findings import Check

RUN = "compiled"
CHECK = "compiled-path"
REFUSED = "Operation not permitted"  # the sandbox's answer to the compiler process Inductor starts
SANDBOXED = (
    "compiling starts a compiler process (Inductor's C++ build, Triton's ptxas), which the sandbox does not "
    "allow (no new processes): the compiled path is not checked here, its eager twin is"
)


def wanted(binding: Binding) -> bool:
    """Classes, where the run was asked to compile (the planner says so)."""
    return binding.target.is_class and binding.style != "function"


def plan(planner: Planner) -> None:
    if planner.compiled:
        planner.add(RUN, planner.plain, variant="compiled")


def judge(view: JudgeView) -> list[Outcome]:
    """compiled-path, when the compiled run was planned and the module holds a compiled callable."""
    if RUN not in view.experiments:
        return []
    error = view.facts["experiments"].get(RUN, {}).get("error", {})
    if error.get("type") == NOT_DECLARED:
        return []
    if REFUSED in error.get("message", ""):
        return [(Check(CHECK, "skipped", SANDBOXED), None, "")]
    skipped = unjudged(view, RUN, CHECK, "compiled")
    if skipped is not None:
        return [(skipped, None, "")]
    assert view.fit is not None
    error_value = max_error(view.output(RUN), view.reference(RUN, None, view.fit))
    detail = (
        f"the torch.compile'd path, run once in float32: max error {error_value:.3g} against the float64 "
        f"reference (tolerance {view.tol:g})"
    )
    return [outcome(CHECK, error_value <= view.tol, detail, codes.REFERENCE_MISMATCH,
                    f"the compiled path differs from the reference by {error_value:.3g} (tolerance {view.tol:g}) "
                    "where the eager run of the same code matches it")]


PROBE = FunctionProbe(CHECK, (codes.REFERENCE_MISMATCH,), 80, wanted, plan, judge, plan_order=80)
