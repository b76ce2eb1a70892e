"""In the child: load the user's module as its project would, whole or its definitions only.

The parent's ``loading.request`` says how (``Request``): the import name and roots from the
module's place in its project, the text to run when it is not the file on disk (stdin, a
notebook's cells), and the definitions-only text. A module of a package is imported through its
package, so its relative imports and the project's own absolute imports resolve as they would
under ``python -m``. When a whole import fails at a top-level statement that the definitions
leave out (a data file read, a training loop), the definitions are loaded instead, and the
reason says so. No torch here: this is plain importing.

The project's own modules are imported from their source only (``SourceOnlyLoader``): a
``__pycache__`` shipped beside them (an unchecked-hash ``.pyc`` is never compared with its
source) would otherwise run instead of the source the static checks and a reviewer read, and
the verdict would be about code nobody saw. Compiled extensions stay importable (a project may
build its own); the interpreter's and the environment's packages keep their bytecode.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import site
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType


@dataclass(frozen=True)
class Loaded:
    """The module, and a sentence when it is not the whole file (``""`` when it is)."""

    module: ModuleType
    how: str = ""


def load(request: dict) -> Loaded:
    """Load the module that ``request`` (what ``loading.request.build`` made, as JSON) describes."""
    path = Path(request["path"])
    top = request.get("package", "").partition(".")[0]
    if top and top in sys.modules:  # a package of this process (torch, attncheck): not the user's to import
        request = {**request, "package": "", "module": request["private"]}
    for root in reversed(request.get("roots", [])):
        if root not in sys.path:
            sys.path.insert(0, root)
    for folder in request.get("site", []):  # the user's environment, after attncheck's own
        site.addsitedir(folder)
    _import_from_source(request.get("roots", []), request.get("site", []))
    definitions = request.get("definitions")
    if request.get("mode") == "definitions" and definitions is not None:
        return Loaded(_run_text(request, definitions), request.get("why", "its definitions only"))
    try:
        return Loaded(_whole(request, path))
    except Exception as error:
        line = _module_level_line(error, path)
        dropped = request.get("dropped", [])
        if definitions is None or line is None or not any(a <= line <= b for a, b in dropped):
            raise
        sys.modules.pop(request["module"], None)
        how = (
            f"ran its definitions only: importing the whole file failed at line {line} "
            f"({type(error).__name__}: {_first_line(error)}), outside the definitions"
        )
        return Loaded(_run_text(request, definitions), how)


def _whole(request: dict, path: Path) -> ModuleType:
    """The whole module: through the import system when it is the package's file on disk."""
    text = request.get("text")
    name = request["module"]
    if text is None and request.get("package"):
        module = importlib.import_module(name)
        if Path(getattr(module, "__file__", "") or "").resolve() == path.resolve():
            return module
        sys.modules.pop(name, None)  # another copy of the package shadows this one: run this file
    if text is None:
        text = path.read_text(encoding=request.get("encoding", "utf-8"))
    return _run_text(request, text)


def _run_text(request: dict, text: str) -> ModuleType:
    """Run ``text`` as the module ``request`` names, its package imported first."""
    name, package, path = request["module"], request.get("package", ""), request["path"]
    if package:
        importlib.import_module(package)
    spec = importlib.util.spec_from_file_location(name, path) or importlib.util.spec_from_loader(name, None)
    if spec is None:
        raise ImportError(f"cannot load {Path(path).name} as a Python module")
    module = importlib.util.module_from_spec(spec)
    module.__file__ = path
    if package:
        module.__package__ = package
    sys.modules[name] = module
    code = compile(text, path, "exec", dont_inherit=True)
    exec(code, module.__dict__)  # running the user's module is the point (inside the sandbox)
    return module


class SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compiles the module from its ``.py`` every time: no ``.pyc`` is read (nor written)."""

    def get_code(self, fullname: str):
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)


def _import_from_source(roots: list[str], environments: list[str]) -> None:
    """Modules in ``roots`` (but in the interpreter's or ``environments``' packages) from source."""
    ours = [Path(folder).resolve() for folder in (sys.prefix, sys.base_prefix, *site.getsitepackages(), *environments)]
    theirs = [Path(root).resolve() for root in roots]

    def project_folder(path: str) -> bool:
        try:
            folder = Path(path or ".").resolve()
        except (OSError, RuntimeError, TypeError):
            return False
        return _within(folder, theirs) and not _within(folder, ours)

    def finder(path: str) -> importlib.machinery.FileFinder:
        if not project_folder(path):
            raise ImportError("not a folder of the project")  # the next hook takes it, bytecode and all
        return importlib.machinery.FileFinder(
            path,
            (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES),
            (SourceOnlyLoader, importlib.machinery.SOURCE_SUFFIXES),
        )

    sys.path_hooks.insert(0, finder)
    for path in [path for path in sys.path_importer_cache if project_folder(path)]:
        del sys.path_importer_cache[path]


def _within(folder: Path, tops: list[Path]) -> bool:
    return any(folder == top or top in folder.parents for top in tops)


def _module_level_line(error: BaseException, path: Path) -> int | None:
    """The line of the user's file whose top-level statement raised, if the error came from there."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.name == "<module>" and Path(f.filename) == path]
    return frames[-1].lineno if frames else None


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:200] if text else ""
