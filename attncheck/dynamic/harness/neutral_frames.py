"""The checker's own code, loaded under names that do not say what it is.

User code that can see it is being checked can behave only then. ``inspect.stack()`` in a forward
shows every frame below it: the child's main, the executor, the recorder. So the processes that
run user code (the child, and the zygote that forks ``grade``'s children) start through
``BOOTSTRAP`` rather than ``python -m``: it installs a finder before the first of the checker's
modules is imported, and every one of them is then loaded with its code objects' file name set to
``<stem>`` (``<executor>``, ``<recorder>``): no path, no package; and the functions' names
(``co_name``, what a frame shows) set to ``NEUTRAL_FUNCTION``, but for dunders (``__init__``,
``__torch_function__``: Python and torch look those up by name). Such file names have no source
lines (``linecache`` skips ``<...>``), so a traceback or ``inspect`` shows no code of the checker
either. The module objects keep their real ``__file__`` (the jail's own set-up reads it);
``inside.disguise`` neutralises what the modules and their classes say of themselves once the
child's code is bound, and makes each module importable under its ``<stem>`` name (``alias``):
torch.compile imports a function mode's class again by its ``__module__`` (the recorder's, under
``flex_attention``).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import CodeType, ModuleType

PACKAGE = "attncheck"
NEUTRAL_FUNCTION = "_"  # every function of the checker, as a frame names it

_aliases: dict[str, ModuleType] = {}  # <stem> -> the module, for imports by that name (``alias``)

# ``python -c BOOTSTRAP MODULE ARGS...`` runs MODULE as ``python -m MODULE ARGS...`` would; its only own
# frame below the module's is ``<string>``.
BOOTSTRAP = (
    "import runpy, sys; __import__('attncheck.dynamic.harness.neutral_frames', fromlist=['install']).install(); "
    "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)"
)


def command(module: str) -> list[str]:
    """The interpreter's arguments that run ``module`` as its ``__main__``, under neutral names."""
    return [sys.executable, "-c", BOOTSTRAP, module]


def neutral_name(module: str) -> str:
    """What a module's code objects name as their file: ``<executor>`` for ``...inside.executor``."""
    return f"<{module.rpartition('.')[2]}>"


def install() -> None:
    """Load every module of the checker imported from now on under its neutral name; the few
    imported to get here (this one and its packages) are dropped, to be imported again so."""
    if not any(isinstance(finder, _NeutralFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _NeutralFinder())
    for name in [name for name in sys.modules if is_checker_module(name)]:
        del sys.modules[name]


def is_checker_module(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


def alias(name: str, module: ModuleType) -> None:
    """Let ``import_module(name)`` find ``module`` (already loaded) from now on."""
    _aliases[name] = module


class _NeutralFinder(importlib.abc.MetaPathFinder):
    """The path finder's spec for the checker's modules, with a loader that renames their code;
    for an ``alias`` name, the module it stands for."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname in _aliases:
            return importlib.util.spec_from_loader(fullname, _AliasLoader(_aliases[fullname]))
        if not is_checker_module(fullname):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            spec.loader = _NeutralLoader(fullname, spec.loader.path)
        return spec


class _NeutralLoader(importlib.machinery.SourceFileLoader):
    """A source loader (cached bytecode and all) whose code names ``neutral_name`` as its file."""

    def get_code(self, fullname: str) -> CodeType | None:
        code = super().get_code(fullname)
        return None if code is None else _renamed(code, neutral_name(fullname))


class _AliasLoader(importlib.abc.Loader):
    """Hands out a module already loaded and run, under another name."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self.module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module ran when it was first imported."""


def _renamed(code: CodeType, filename: str) -> CodeType:
    """``code`` and every code object nested in it (functions, classes, lambdas) under ``filename``,
    each function named ``NEUTRAL_FUNCTION`` but dunders and ``<module>``, ``<lambda>``, ``<genexpr>``."""
    constants = tuple(_renamed(item, filename) if isinstance(item, CodeType) else item for item in code.co_consts)
    name = code.co_name
    kept = name.startswith("<") or (name.startswith("__") and name.endswith("__"))
    if kept:
        return code.replace(co_filename=filename, co_consts=constants)
    return code.replace(co_filename=filename, co_consts=constants, co_name=NEUTRAL_FUNCTION,
                        co_qualname=NEUTRAL_FUNCTION)
