"""Old module paths that keep importing after a module moved: ``llmtrace.adapters.loops`` is
``llmtrace.adapters.helpers.loops`` (the same module object, so its state and its patches are shared).

``install(package, moved)`` adds one finder to ``sys.meta_path`` that answers only for ``package.<old>``;
the real module is imported on first use, so an alias costs nothing until it is named.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Mapping
from importlib.machinery import ModuleSpec
from types import ModuleType


class _Aliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, package: str, moved: Mapping[str, str]) -> None:
        self.package = package
        self.moved = dict(moved)
        self._specs: dict[str, ModuleSpec | None] = {}

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        head, _, tail = fullname.rpartition(".")
        if head != self.package or tail not in self.moved:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.moved[spec.name.rpartition(".")[2]])
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import system set the alias's spec on the real module: give it back its own
        module.__spec__ = self._specs.pop(module.__name__, module.__spec__)


def install(package: str, moved: Mapping[str, str]) -> None:
    """Make ``package.<old>`` import ``moved[old]`` (a full module name)."""
    if not any(isinstance(f, _Aliases) and f.package == package for f in sys.meta_path):
        sys.meta_path.append(_Aliases(package, moved))
