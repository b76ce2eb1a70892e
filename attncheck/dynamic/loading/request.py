"""In the parent: how the child is to load a checked file (the ``load`` part of its request).

What runs is what was linted: the text the static pass read, when it is not the file on disk
(standard input shown under a file's name, a notebook's code cells), goes to the child; a file
on disk unchanged is imported from disk, through its package. The static look at the top level
(``definitions.read``) decides between the whole module and its definitions only.
"""

from __future__ import annotations

import os
from pathlib import Path

from attncheck.dynamic.loading import definitions, project
from attncheck.sources import Source


def build(source: Source) -> dict:
    """The child's loading instructions for ``source`` (plain JSON data)."""
    location = project.locate(source.path)
    top = definitions.read(source.text)
    text = None if _unchanged_on_disk(source, location.path) else source.text
    request = _whole(location, text, source.encoding)
    if top is None:
        return request
    request.update(definitions=top.definitions, dropped=[list(span) for span in top.dropped])
    if top.work or (source.is_notebook and top.skipped):
        request["mode"] = "definitions"
        request["why"] = _why(source, top)
    return request


def from_disk(path: Path) -> dict:
    """Import the whole file from disk through its package: for a caller that sent no instructions
    (the sandbox run directly, as its own tests do), so that it runs exactly what it was given."""
    return _whole(project.locate(path), None, "utf-8")


def _whole(location: project.Location, text: str | None, encoding: str) -> dict:
    """Import the whole module: from disk when ``text`` is None."""
    return {
        "path": str(location.path),
        "module": location.module,
        "package": location.package,
        "private": project.private_name(location.path),
        "roots": [str(root) for root in location.roots],
        "site": [str(folder) for folder in project.environment_packages(location.project, os.environ)],
        "text": text,
        "encoding": encoding,
        "mode": "full",
    }


def _why(source: Source, top: definitions.TopLevel) -> str:
    """The sentence a target's reason carries when only the definitions ran."""
    skipped = f"{top.skipped} top-level statement{'s' if top.skipped != 1 else ''} skipped"
    if top.work:
        return f"ran its definitions only: the top level does real work ({definitions.describe(top.work)}); {skipped}"
    return f"ran the notebook's definitions only; {skipped}"


def _unchanged_on_disk(source: Source, path: Path) -> bool:
    """Whether importing ``path`` runs exactly the text that was linted (not stdin's buffer, not a
    notebook, not a file edited since)."""
    if source.is_notebook or path.suffix != ".py":
        return False
    try:
        return path.read_bytes().decode(source.encoding).removeprefix("\ufeff") == source.text
    except (OSError, UnicodeDecodeError, LookupError):
        return False
