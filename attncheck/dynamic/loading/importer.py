"""In the child: load the user's module as its project would, whole or its definitions only.

The parent's ``loading.request`` says how (``Request``): the import name and roots from the
module's place in its project, the text to run when it is not the file on disk (stdin, a
notebook's cells), and the definitions-only text. A module of a package is imported through its
package, so its relative imports and the project's own absolute imports resolve as they would
under ``python -m``. When a whole import fails at a top-level statement that the definitions
leave out (a data file read, a training loop), the definitions are loaded instead, and the
reason says so. No torch here: this is plain importing.
"""

from __future__ import annotations

import importlib
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


def _module_level_line(error: BaseException, path: Path) -> int | None:
    """The line of the user's file whose top-level statement raised, if the error came from there."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.name == "<module>" and Path(f.filename) == path]
    return frames[-1].lineno if frames else None


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:200] if text else ""
