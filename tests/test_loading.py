"""Loading the user's module as its project would (issue 16, items 1 and 2), without torch:
where a file sits in its package, what of its top level runs, and the child's importer."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from attncheck.dynamic.loading import definitions, project, request
from attncheck.sources import Source, read_path

ROOT = Path(__file__).resolve().parent.parent
LOADING = ROOT / "fixtures" / "loading"


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


# --- where a file sits in its project ---------------------------------------------------------


def test_module_of_a_package_is_named_through_its_package() -> None:
    location = project.locate(LOADING / "package-repo" / "mypkg" / "models" / "attention.py")
    assert location.module == "mypkg.models.attention"
    assert location.package == "mypkg.models"
    assert location.roots[0] == LOADING / "package-repo"


def test_package_module_does_not_put_its_own_folder_on_the_path() -> None:
    location = project.locate(LOADING / "package-repo" / "mypkg" / "models" / "attention.py")
    assert LOADING / "package-repo" / "mypkg" / "models" not in location.roots


def test_file_outside_any_package_gets_a_private_name_and_its_folder(tmp_path: Path) -> None:
    _write(tmp_path, {"attention.py": "x = 1\n"})
    location = project.locate(tmp_path / "attention.py")
    assert location.module.startswith(project.PRIVATE_PREFIX)
    assert location.package == ""
    assert location.roots == (tmp_path,)


def test_src_layout_and_project_root_are_roots(tmp_path: Path) -> None:
    _write(tmp_path, {"pyproject.toml": "", "src/lib/__init__.py": "", "src/lib/attn.py": "", "scripts/run.py": ""})
    assert project.locate(tmp_path / "src" / "lib" / "attn.py").roots[0] == tmp_path / "src"
    script = project.locate(tmp_path / "scripts" / "run.py")
    assert script.roots == (tmp_path / "scripts", tmp_path, tmp_path / "src")


def test_package_init_is_the_package_itself(tmp_path: Path) -> None:
    _write(tmp_path, {"pkg/__init__.py": ""})
    location = project.locate(tmp_path / "pkg" / "__init__.py")
    assert (location.module, location.package) == ("pkg", "pkg")


def test_folder_that_is_not_an_identifier_ends_the_package(tmp_path: Path) -> None:
    _write(tmp_path, {"my-repo/__init__.py": "", "my-repo/pkg/__init__.py": "", "my-repo/pkg/attn.py": ""})
    location = project.locate(tmp_path / "my-repo" / "pkg" / "attn.py")
    assert location.module == "pkg.attn"
    assert location.roots[0] == tmp_path / "my-repo"


def test_project_module_is_told_from_a_third_party_one(tmp_path: Path) -> None:
    _write(tmp_path, {"mypkg/__init__.py": "", "helpers.py": ""})
    assert project.is_project_module("mypkg.config", (tmp_path,))
    assert project.is_project_module("helpers", (tmp_path,))
    assert not project.is_project_module("einops", (tmp_path,))


# --- what of the top level runs ---------------------------------------------------------------


def test_definitions_only_module_is_imported_whole() -> None:
    top = definitions.read(read_path(LOADING / "package-repo" / "mypkg" / "models" / "attention.py").text)
    assert top is not None
    assert top.work == ()


@pytest.mark.parametrize(
    ("line", "what", "where"),
    [
        ("x = input('name? ')", "input()", 2),
        ("for i in range(3):\n    pass", "a loop", 2),
        ("with open('f') as f:\n    pass", "a with block", 2),
        ("train(model)", "train()", 2),
        ("data = torch.load('data.pt')", "load()", 2),
        ("plot_everything()", "a call of plot_everything()", 2),
        ("if flag:\n    while True:\n        pass", "a loop", 3),
    ],
)
def test_real_work_at_the_top_level_is_named(line: str, what: str, where: int) -> None:
    top = definitions.read(f"import torch\n{line}\n")
    assert top is not None
    assert [(w.what, w.line) for w in top.work] == [(what, where)]


@pytest.mark.parametrize(
    "line",
    ["torch.manual_seed(0)", "warnings.filterwarnings('ignore')", "logger = logging.getLogger(__name__)",
     "sys.path.insert(0, '.')", "if __name__ == '__main__':\n    main()", "D = 64 // 4"],
)
def test_setup_and_constants_are_not_work(line: str) -> None:
    top = definitions.read(f"import torch\n{line}\n")
    assert top is not None
    assert top.work == ()


def test_definitions_text_keeps_lines_and_leaves_out_the_work() -> None:
    text = read_path(LOADING / "training_script.py").text
    top = definitions.read(text)
    assert top is not None
    kept = top.definitions
    assert kept.count("\n") == text.count("\n")
    assert "torch.load" not in kept and "backward" not in kept and "model = " not in kept
    assert "class SelfAttention" in kept and "D_MODEL = 32" in kept and "torch.manual_seed(0)" in kept
    compile(kept, "training_script.py", "exec")
    assert top.skipped == 4
    assert (34, 37) in top.dropped and not any(first <= 17 <= last for first, last in top.dropped)


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("import x; main(); y = 2\n", "import x; y = 2\n"),
        ("main(); import x\n", "import x\n"),
        ("a = (1,\n 2); main(\n 3); b = 2\n", "a = (1,\n2)\nb = 2\n"),
        ("é = 1; main('é'); z = 1\r\nw = 2", "é = 1; z = 1\r\nw = 2"),
    ],
)
def test_statements_sharing_a_line_are_cut_exactly(text: str, kept: str) -> None:
    top = definitions.read(text)
    assert top is not None
    assert top.definitions == kept
    compile(top.definitions, "<test>", "exec")


def test_names_bound_by_left_out_statements_leave_out_their_users() -> None:
    top = definitions.read("import torch\nm = Model()\nn = m\nclass Model: pass\nk = 3\n")
    assert top is not None
    assert top.dropped == ((2, 2), (3, 3))


def test_unparsable_text_has_no_top_level() -> None:
    assert definitions.read("def broken(:\n") is None


# --- the request the parent sends -------------------------------------------------------------


def test_notebook_runs_its_cells_text_and_only_its_definitions() -> None:
    source = read_path(LOADING / "notebook" / "homework.ipynb")
    assert isinstance(source, Source)
    built = request.build(source)
    assert built["text"] == source.text
    assert built["mode"] == "definitions"
    assert "notebook's definitions only" in built["why"]


def test_notebook_of_definitions_runs_whole() -> None:
    source = read_path(LOADING / "notebook" / "correct.ipynb")
    assert isinstance(source, Source)
    assert request.build(source)["mode"] == "full"


def test_stdin_buffer_is_sent_not_the_file_on_disk() -> None:
    on_disk = LOADING / "stdin" / "mymodel.py"
    buffer = (LOADING / "stdin" / "stdin_buffer.py").read_text(encoding="utf-8")
    built = request.build(Source(str(on_disk), buffer))
    assert built["text"] == buffer


def test_file_unchanged_on_disk_is_imported_from_disk() -> None:
    source = read_path(LOADING / "package-repo" / "mypkg" / "models" / "attention.py")
    assert isinstance(source, Source)
    built = request.build(source)
    assert built["text"] is None
    assert (built["module"], built["mode"]) == ("mypkg.models.attention", "full")


def test_script_that_works_says_what_it_does() -> None:
    source = read_path(LOADING / "training_script.py")
    assert isinstance(source, Source)
    built = request.build(source)
    assert built["mode"] == "definitions"
    assert "load() at line 32" in built["why"] and "4 top-level statements skipped" in built["why"]


# --- the child's importer, in a fresh interpreter ---------------------------------------------

LOAD_SCRIPT = """
import json, sys
from attncheck.dynamic.loading import importer
try:
    loaded = importer.load(json.loads(sys.argv[1]))
except BaseException as error:
    print(json.dumps({"error": type(error).__name__, "message": str(error)}))
else:
    print(json.dumps({"name": loaded.module.__name__, "how": loaded.how,
                      "value": getattr(loaded.module, "VALUE", None)}))
"""


def _load(source: Source) -> dict:
    built = request.build(source)
    completed = subprocess.run(
        [sys.executable, "-c", LOAD_SCRIPT, json.dumps(built)],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _package(tmp_path: Path) -> Path:
    _write(tmp_path, {
        "pyproject.toml": "",
        "proj/__init__.py": "",
        "proj/config.py": "HEADS = 4\n",
        "proj/models/__init__.py": "",
        "proj/models/relative.py": "from ..config import HEADS\nVALUE = HEADS * 2\n",
        "proj/models/absolute.py": "from proj.config import HEADS\nVALUE = HEADS * 3\n",
    })
    return tmp_path / "proj" / "models"


@pytest.mark.parametrize(("name", "value"), [("relative", 8), ("absolute", 12)])
def test_package_module_imports_through_its_package(tmp_path: Path, name: str, value: int) -> None:
    source = read_path(_package(tmp_path) / f"{name}.py")
    assert isinstance(source, Source)
    loaded = _load(source)
    assert loaded == {"name": f"proj.models.{name}", "how": "", "value": value}


def test_edited_buffer_of_a_package_module_runs_in_its_package(tmp_path: Path) -> None:
    path = _package(tmp_path) / "relative.py"
    loaded = _load(Source(str(path), "from ..config import HEADS\nVALUE = HEADS + 100\n"))
    assert loaded["value"] == 104


def test_whole_import_failing_outside_the_definitions_falls_back(tmp_path: Path) -> None:
    _write(tmp_path, {"script.py": "import pathlib\nVALUE = 7\nassert pathlib.Path('absent.pt').exists()\n"})
    source = read_path(tmp_path / "script.py")
    assert isinstance(source, Source)
    loaded = _load(source)
    assert loaded["value"] == 7
    assert "failed at line 3 (AssertionError" in loaded["how"] and "outside the definitions" in loaded["how"]


def test_import_time_error_in_the_definitions_stays_an_error(tmp_path: Path) -> None:
    _write(tmp_path, {"script.py": "SIZES = {'a': 1}\nVALUE = SIZES['b']\n"})
    source = read_path(tmp_path / "script.py")
    assert isinstance(source, Source)
    assert _load(source) == {"error": "KeyError", "message": "'b'"}


def test_missing_third_party_module_is_a_module_not_found(tmp_path: Path) -> None:
    _write(tmp_path, {"script.py": "import attncheck_absent_dependency\nVALUE = 1\n"})
    source = read_path(tmp_path / "script.py")
    assert isinstance(source, Source)
    assert _load(source)["error"] == "ModuleNotFoundError"


def test_exiting_at_import_is_left_for_the_import_to_report() -> None:
    top = definitions.read("import sys\nsys.exit(0)\n")
    assert top is not None
    assert top.work == ()


def test_a_file_given_without_instructions_is_imported_whole_from_disk() -> None:
    built = request.from_disk(LOADING / "training_script.py")
    assert (built["mode"], built["text"]) == ("full", None)


def test_the_users_environment_is_found_after_attncheck_s_own(tmp_path: Path) -> None:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    _write(tmp_path, {"pyproject.toml": "", f".venv/lib/{version}/site-packages/userlib.py": "VALUE = 5\n",
                      "script.py": "from userlib import VALUE\n"})
    site_packages = tmp_path / ".venv" / "lib" / version / "site-packages"
    assert project.environment_packages(tmp_path, {}) == (site_packages,)
    assert project.environment_packages(None, {"VIRTUAL_ENV": str(tmp_path / ".venv")}) == (site_packages,)
    assert project.environment_packages(None, {"VIRTUAL_ENV": sys.prefix}) == ()  # attncheck's own
    source = read_path(tmp_path / "script.py")
    assert isinstance(source, Source)
    assert _load(source)["value"] == 5
