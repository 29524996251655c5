"""Finding and loading catalog backends by name, as adapters are found and loaded.

Backends come from the built-in in-memory one (``memory``), the entry-point group
``pando_runtime.catalogs`` and :func:`register_catalog`, later ones winning. Targets are
``"module:attr"`` strings naming a :class:`CatalogInfo`, resolved on use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ._catalog import CatalogBackend, CatalogInfo
from ._config import structure_config
from ._errors import CatalogNotInstalled, UnknownCatalog
from ._registry import import_attr, plugin_targets, register_target

__all__ = [
    "CATALOG_ENTRY_POINT_GROUP",
    "available_catalogs",
    "load_catalog",
    "register_catalog",
]

CATALOG_ENTRY_POINT_GROUP = "pando_runtime.catalogs"

_BUILTIN: dict[str, str] = {"memory": "pando_runtime.testing._memory_catalog:MEMORY_CATALOG"}
_registered: dict[str, str] = {}


def register_catalog(name: str, target: str, *, clobber: bool = False) -> None:
    """Make a catalog backend loadable by ``name``; ``target`` names a :class:`CatalogInfo`.

    Nothing is imported now. Registering a taken name raises ``ValueError`` unless
    ``clobber`` is true.
    """
    register_target(_registered, "catalog", name, target, clobber=clobber)


def _targets() -> dict[str, str]:
    return plugin_targets(CATALOG_ENTRY_POINT_GROUP, _BUILTIN, _registered)


def _info_from(name: str, target: str) -> CatalogInfo:
    try:
        value = import_attr(target)
    except (ImportError, AttributeError) as error:
        raise CatalogNotInstalled(
            f"catalog {name!r} is registered but {target!r} cannot be imported: {error}",
            details={"catalog": name, "target": target},
        ) from error
    if not isinstance(value, CatalogInfo):
        msg = f"{target!r} is not a CatalogInfo"
        raise CatalogNotInstalled(msg, details={"catalog": name, "target": target})
    return value if value.name == name else attrs.evolve(value, name=name)


def available_catalogs() -> list[CatalogInfo]:
    """Every catalog backend that can be named, sorted by name (``problem`` set if broken)."""
    infos = []
    for name, target in sorted(_targets().items()):
        try:
            infos.append(_info_from(name, target))
        except CatalogNotInstalled as error:
            infos.append(
                CatalogInfo(name=name, description="", factory=target, problem=error.message)
            )
    return infos


def load_catalog(name: str, config: Mapping[str, Any] | Any | None = None) -> CatalogBackend:
    """Construct the catalog backend called ``name`` with ``config``.

    Raises:
        UnknownCatalog: no backend has that name; the message lists those installed.
        CatalogNotInstalled: its code or a dependency is missing.
        InvalidConfig: ``config`` has unknown keys, wrong types or numbers out of range;
            each is named.
    """
    targets = _targets()
    if name not in targets:
        installed = ", ".join(sorted(targets)) or "none"
        raise UnknownCatalog(
            f"no catalog backend is named {name!r}; installed: {installed}",
            details={"catalog": name, "installed": sorted(targets)},
        )
    info = _info_from(name, targets[name])
    settings = structure_config(info.config_class, config, what=f"{name} catalog config")
    try:
        factory = import_attr(info.factory)
    except ImportError as error:
        raise CatalogNotInstalled(
            f"catalog {name!r} cannot be imported: {error}",
            remedy=info.hint,
            details={"catalog": name, "missing": getattr(error, "name", None)},
        ) from error
    backend = factory(settings)
    if not isinstance(backend, CatalogBackend):
        msg = f"{info.factory!r} did not return a CatalogBackend"
        raise CatalogNotInstalled(msg, details={"catalog": name})
    return backend
