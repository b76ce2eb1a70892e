"""Issue 23's done-when, in place: the installed transformers' attention classes checked by
``attncheck check`` on their own modeling files (imported through the package, built from their
config classes, called with the rotary pair and the 4-D mask their model would pass).

Each class must pass or be skipped with a precise reason; none may end in an error. The
expectations were read on transformers 5.24.0 (the version ``bench/corpus.py`` pins); another
version skips this test, as does an environment without transformers. One ``attncheck`` run for
all files (module scope): importing a modeling file is the slow part, so four files stand for
the families (rotary and caller's mask, window, local layer with string choice and unit scale,
ALiBi passed in, built by the file's own ``build_alibi_tensor``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.sandbox

transformers = pytest.importorskip("transformers")
if transformers.__version__ != "5.24.0":
    pytest.skip(f"expectations read on transformers 5.24.0, {transformers.__version__} installed",
                allow_module_level=True)

MODELS = Path(transformers.__file__).parent / "models"
ROOT = Path(__file__).resolve().parents[1]
# class -> (status, what its reason or checks must say)
EXPECTED = {
    "LlamaAttention": ("passed", "rotary: half-split"),
    "MistralAttention": ("passed", "sliding window 3 (W keys)"),
    "GPTNeoSelfAttention": ("passed", "scale 1, sliding window 3 (W keys)"),
    # the alibi its model builds, from the file's build_alibi_tensor; rows read head by head
    "BloomAttention": ("passed", "fused per head: q, k, v of each head in turn, as GPT-NeoX), O=dense; causal: none; "
                                 "declared variant: ALiBi (post-scale)"),
}
FILES = ("llama", "mistral", "gpt_neo", "bloom")  # the rest of issue 23's list: bench/realworld.py --dynamic


@pytest.fixture(scope="module")
def report() -> dict:
    paths = [str(MODELS / name / f"modeling_{name}.py") for name in FILES]
    ran = subprocess.run(
        [sys.executable, "-m", "attncheck", *paths, "--format", "json", "--exit-zero", "--no-cache",
         "--timeout", "120", "--device", "cpu", "--jobs", "2"],
        capture_output=True, text=True, cwd=ROOT, timeout=900, check=False,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    return json.loads(ran.stdout)


def _described(target: dict) -> str:
    checks = "\n".join(f"{c['name']}: {c['status']}: {c.get('detail', '')}" for c in target.get("checks", []))
    return f"{target.get('reason') or ''}\n{checks}"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_attention_class_passes_or_is_skipped_with_its_reason(report, name):
    target = next(t for t in report["targets"] if t["name"] == name)
    status, said = EXPECTED[name]
    assert target["status"] == status, _described(target)
    assert said in _described(target)


def test_no_target_of_these_files_errs_and_no_dynamic_error_is_reported(report):
    assert not [t["name"] for t in report["targets"] if t["status"] == "error"]
    errors = [f for f in report["findings"] if f["source"] != "static" and f["severity"] == "error"]
    assert not errors, [(f["target"], f["code"], f["message"][:200]) for f in errors]
