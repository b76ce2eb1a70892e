"""Attention forms the token reference (``mha``) does not compute, each modelled as a whole.

Channel attention (DaViT, XCiT) and talking heads (CaiT) are not plain attention plus a score or
mask term: the first attends across channels, the second mixes the scores across heads before and
after the softmax. Each is a :class:`Form`: called on the module's batch-first inputs with the
projections the fit assigned, it returns the module's output; its :meth:`Form.mistakes` are the
same form with one mistake each, which the diagnosis (``diagnosis.forms``) tries when no correct
reading explains the output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from attncheck.dynamic.reference.mha import Linear, Projections


class Form(Protocol):
    """A whole attention computation read from the module, named for the report."""

    @property
    def text(self) -> str: ...

    @property
    def masked(self) -> str:
        """Why the form takes no key mask ('' when ``keep`` is modelled)."""
        ...

    def __call__(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, proj: Projections,
        keep: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The module's output on batch-first (b, s, d) inputs; ``keep`` (bool, True = attend) is the mask."""
        ...

    def mistakes(self, width: int) -> list[Mistake]: ...


def project(layer: Linear | None, x: torch.Tensor) -> torch.Tensor:
    """A projection the fit assigned, None being the identity."""
    return x if layer is None else layer(x)


@dataclass(frozen=True)
class Mistake:
    """A form with one mistake: its catalogue code, name, what it does and the fix."""

    code: str
    name: str
    what: str
    fix: str
    form: Form
