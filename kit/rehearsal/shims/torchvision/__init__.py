"""Minimal `torchvision` stand-in, shipped ONLY in the CPU rehearsal image.

Why it exists: PyPI's torchvision wheels do not load beside the CPU torch 2.13.0 wheel
("operator torchvision::nms does not exist"), yet SGLang imports torchvision at start-up for its
multimodal processors, which a text-only rehearsal never runs. Choosing a CPU torch (a ~190 MB wheel)
over PyPI's torch 2.14.1 (~6.3 GB with CUDA libraries) keeps the rehearsal image small and its CI
build fast; this stand-in is the price.

Every `torchvision.*` module imports; every attribute is a placeholder that can be read (SGLang
reads `InterpolationMode.BICUBIC` in default arguments at import time) but raises
NotImplementedError when called. There is no dist-info, so `transformers` sees torchvision as
absent and keeps to its own image code.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+kit.cpu.rehearsal"


class _Placeholder:
    def __init__(self, path: str):
        self._path = path

    def __getattr__(self, name: str) -> _Placeholder:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self._path}.{name}")

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(
            f"{self._path} is not available in the kit's CPU rehearsal image "
            "(kit/rehearsal/shims/torchvision is a stand-in)"
        )

    def __repr__(self) -> str:
        return f"<kit rehearsal placeholder {self._path}>"

    # Annotations evaluated at import time combine them with types (`PILImageResampling |
    # InterpolationMode | None` in transformers' video processors).
    def __or__(self, other: object) -> _Placeholder:
        return self

    __ror__ = __or__

    # Some code puts enum members in dicts or sets at import time.
    def __hash__(self) -> int:
        return hash(self._path)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Placeholder) and other._path == self._path


def _module_getattr(module_name: str):
    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{module_name}.{name}")

    return __getattr__


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers every `torchvision.<sub>` import with a placeholder module."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _module_getattr(spec.name)
        return module

    def exec_module(self, module):
        return None


sys.meta_path.append(_StandInFinder())
__getattr__ = _module_getattr(__name__)
