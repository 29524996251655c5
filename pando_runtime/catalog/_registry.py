"""Finding and loading catalog backends by name: the catalog kind of plugin.

Backends come from the built-in in-memory one (``memory``), the entry-point group
``pando_runtime.catalogs`` and :func:`register_catalog`, later ones winning. Targets are
``"module:attr"`` strings naming a :class:`CatalogInfo`, resolved on use. The mechanism is
every plugin kind's (:class:`PluginKind`, in ``_plugins``), as adapters are found and loaded;
what is the catalogs' own is here: settings are checked before the backend's code is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._contract._errors import CatalogNotInstalled, UnknownCatalog
from .._input._config import structure_config
from .._plugins._kinds import PluginKind
from ._types import CatalogBackend, CatalogInfo

__all__ = [
    "CATALOG_ENTRY_POINT_GROUP",
    "available_catalogs",
    "load_catalog",
    "register_catalog",
]

CATALOG_ENTRY_POINT_GROUP = "pando_runtime.catalogs"

CATALOGS = PluginKind(
    kind="catalog",
    group=CATALOG_ENTRY_POINT_GROUP,
    builtin={"memory": "pando_runtime.testing._memory_catalog:MEMORY_CATALOG"},
    info_type=CatalogInfo,
    info_of=lambda value: value if isinstance(value, CatalogInfo) else None,
    expected="not a CatalogInfo",
    unknown="no catalog backend is named {name!r}; installed: {installed}",
    not_installed=CatalogNotInstalled,
    unknown_error=UnknownCatalog,
)


def register_catalog(name: str, target: str, *, clobber: bool = False) -> None:
    """Make a catalog backend loadable by ``name``; ``target`` names a :class:`CatalogInfo`.

    Nothing is imported now. Registering a taken name raises ``ValueError`` unless
    ``clobber`` is true.
    """
    CATALOGS.register(name, target, clobber=clobber)


def available_catalogs() -> list[CatalogInfo]:
    """Every catalog backend that can be named, sorted by name (``problem`` set if broken)."""
    return CATALOGS.available()


def load_catalog(name: str, config: Mapping[str, Any] | Any | None = None) -> CatalogBackend:
    """Construct the catalog backend called ``name`` with ``config``.

    Raises:
        UnknownCatalog: no backend has that name; the message lists those installed.
        CatalogNotInstalled: its code or a dependency is missing.
        InvalidConfig: ``config`` has unknown keys, wrong types or numbers out of range;
            each is named.
    """
    info = CATALOGS.find(name)
    settings = structure_config(info.config_class, config, what=f"{name} catalog config")
    backend = CATALOGS.import_factory(name, info)(settings)
    if not isinstance(backend, CatalogBackend):
        msg = f"{info.factory!r} did not return a CatalogBackend"
        raise CatalogNotInstalled(msg, details={"catalog": name})
    return backend
