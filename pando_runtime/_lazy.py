"""Names that import their module on first use: one mechanism for each public namespace.

``pando_runtime``, ``pando_runtime.plugin`` and ``pando_runtime.catalog`` each keep a table of
their public names by the private module that defines them; an adapter's package does the same
(:func:`lazy_attributes` is public in ``pando_runtime.plugin``). Importing a namespace imports
none of those modules; the first use of a name imports its module and caches the value in the
namespace, so later lookups are plain attribute reads. Names that moved to another namespace
still resolve where they were, with a :class:`DeprecationWarning` that names the new home.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Moved", "Renamed", "lazy_attributes"]

Moved = Mapping[str, str]
"""Old name -> the public namespace that has it now (``"pando_runtime.catalog"``)."""

Renamed = Mapping[str, tuple[str, str]]
"""Old name -> (its new name, the private module of the root package that defines it)."""


def lazy_attributes(
    namespace: str,
    exports: Mapping[str, tuple[str, ...]],
    namespace_globals: dict[str, Any],
    *,
    moved: Moved | None = None,
    renamed: Renamed | None = None,
    submodules: frozenset[str] = frozenset(),
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the module ``namespace`` with the public ``exports``.

    ``exports`` maps each defining private module of the root package (``"_plans"``, or
    ``"api._transport"`` below it) to the names it gives; ``submodules`` are public modules
    reached as attributes (``pr.catalog``).
    The ``__getattr__`` is to be the module's own, so a deprecation warning points at the
    caller's line.
    """
    package = namespace.split(".", maxsplit=1)[0]
    module_of = {name: module for module, names in exports.items() for name in names}
    moved = moved or {}
    renamed = renamed or {}
    public = sorted(module_of)

    def deprecated(old: str, new: str) -> None:
        warnings.warn(
            f"{namespace}.{old} is {new} now; the old name goes at adapter API 2.0",
            DeprecationWarning,
            stacklevel=3,  # the line that named it, past getattr_
        )

    def getattr_(name: str) -> Any:
        module = module_of.get(name)
        if module is not None:
            value = getattr(importlib.import_module(f"{package}.{module}"), name)
            namespace_globals[name] = value
            return value
        if name in moved:
            home = moved[name]
            deprecated(name, f"{home}.{name}")
            return getattr(importlib.import_module(home), name)
        if name in renamed:
            new, module = renamed[name]
            deprecated(name, new)
            return getattr(importlib.import_module(f"{package}.{module}"), new)
        if name in submodules:
            return importlib.import_module(f"{namespace}.{name}")
        msg = f"module {namespace!r} has no attribute {name!r}"
        raise AttributeError(msg)

    def dir_() -> list[str]:
        return sorted({*namespace_globals, *public, *submodules})

    return getattr_, dir_
