"""Packages whose parts load on first use (``compression``, ``parallel``): importing the package stays
light, and ``package.part`` imports that part the first time it is read."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any


def parts_loader(
    package: str, parts: tuple[str, ...], namespace: dict[str, Any]
) -> tuple[Callable[[str], ModuleType], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the package ``package`` (its ``__name__``) with submodules ``parts``;
    ``namespace`` is the package's ``globals()``, where a loaded part is kept."""

    def __getattr__(name: str) -> ModuleType:
        if name in parts:
            module = importlib.import_module(f".{name}", package)
            namespace[name] = module
            return module
        raise AttributeError(f"module {package!r} has no attribute {name!r}; its parts are {', '.join(parts)}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(parts))

    return __getattr__, __dir__
