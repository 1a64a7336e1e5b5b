"""Let PyPI's CUDA-linked torchvision import beside the CPU build of torch.

torchvision registers fake kernels for ``torchvision::nms`` and
``torchvision::qnms`` at import; when its compiled extension cannot load (it is
linked against CUDA torch) those operators were never defined and the import
fails, taking ``transformers`` and vLLM's vision models with it. Defining the
two schemas first lets the import succeed; image transforms never call them.

The engine environment's ``site-packages`` gets a copy of this file and a
``.pth`` line that calls :func:`install`, so every interpreter of that
environment (spawned EngineCore and worker processes included) has it. It
imports torch only when torchvision is about to be imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

_LIBRARY: list[Any] = []
_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)


def define_operators() -> None:
    """Define the operator schemas torchvision expects (once per process)."""
    if _LIBRARY:
        return
    import torch  # type: ignore[import-not-found]

    library = torch.library.Library("torchvision", "DEF")
    for schema in _SCHEMAS:
        name = schema.split("(", 1)[0]
        if hasattr(torch.ops.torchvision, name):
            continue
        try:
            library.define(schema)
        except RuntimeError:
            continue
    _LIBRARY.append(library)  # the registration lives as long as this object


class _BeforeTorchvision(importlib.abc.MetaPathFinder):
    """Runs :func:`define_operators` right before torchvision is first imported."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "torchvision":
            sys.meta_path.remove(self)
            define_operators()
        return None  # let the regular finders load the module


def install() -> None:
    if "torchvision" in sys.modules or any(
        isinstance(f, _BeforeTorchvision) for f in sys.meta_path
    ):
        return
    sys.meta_path.insert(0, _BeforeTorchvision())
