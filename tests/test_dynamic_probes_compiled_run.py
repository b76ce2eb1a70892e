"""Issue 23, item 4: torch.compile'd code is checked compiled only when asked (``compile = true``).

Compiling flex_attention for the CPU took 16-35 s for the probes' one shape with torch 2.13
(``bench/flex_compile.py``), against 3 s a module, so every forward of such code runs eagerly and
the forward check says how to ask for the compiled run. Asked, one more run of the plain inputs
takes the compiled path, in float32, held to the float64 reference. The test that compiles is
slow (16-35 s) but runs in the suite wherever a C++ compiler is (Inductor needs one); the sandbox
refuses the compiler process, so it runs in process.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from attncheck.config import COMPILE_TIMEOUT_S, load
from attncheck.dynamic.runner import check_file
from attncheck.errors import ConfigError
from tests.dynamic_support import FIXTURES, Options, file_result, in_process_child

pytest.importorskip("torch.nn.attention.flex_attention")

COMPILED = FIXTURES / "correct" / "variant_flex_compiled_sliding_window.py"


def _checks(path: Path, compile_: bool) -> dict:
    _, (result,) = check_file(file_result(path), Options(compile=compile_), in_process_child)
    return {check.name: check for check in result.checks}


def test_compile_is_a_boolean_setting_that_gives_a_target_time_to_compile(tmp_path):
    config = tmp_path / "pyproject.toml"
    config.write_text("[tool.attncheck]\ncompile = true\ntimeout = 30\n")
    settings = load(config)
    assert settings.compile and settings.dynamic_options(1).compile
    assert settings.dynamic_options(1).timeout == COMPILE_TIMEOUT_S
    config.write_text("[tool.attncheck]\ntimeout = 30\n")
    assert load(config).dynamic_options(1).timeout == 30 and not load(config).compile
    config.write_text('[tool.attncheck]\ncompile = "yes"\n')
    with pytest.raises(ConfigError, match="compile must be true or false"):
        load(config)


def test_by_default_compiled_code_runs_eagerly_and_the_forward_check_says_how_to_ask():
    checks = _checks(COMPILED, compile_=False)
    assert "compiled-path" not in checks
    assert "compile = true in [tool.attncheck] also runs the compiled path once" in checks["forward"].detail


def test_asked_to_compile_a_module_without_compiled_callables_gets_no_compiled_check():
    checks = _checks(FIXTURES / "correct" / "variant_flex_softcap.py", compile_=True)
    assert checks["reference"].status == "passed" and "compiled-path" not in checks


@pytest.mark.slow  # compiles flex_attention: 16-35 s on a CPU, the one proof the compiled path is judged
@pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None,
                    reason="Inductor's CPU backend needs a C++ compiler, which this machine lacks")
def test_asked_to_compile_the_compiled_kernel_matches_the_reference_in_float32():
    checks = _checks(COMPILED, compile_=True)
    assert checks["compiled-path"].status == "passed", checks["compiled-path"].detail
    assert "the torch.compile'd path, run once in float32: max error" in checks["compiled-path"].detail
