"""A service catalog kept equal to what runs: backends, sources and the syncer.

A :class:`CatalogSyncer` writes what a source publishes (:class:`BundleSource`: the apps a
runtime runs) into a :class:`CatalogBackend` loaded by name (:func:`load_catalog`; Consul is a
plugin of the entry-point group :data:`CATALOG_ENTRY_POINT_GROUP`). See ``docs/catalog.md``.
"""

from __future__ import annotations

from .._lazy import lazy_attributes

TYPE_CHECKING = False
if TYPE_CHECKING:  # the same names as _EXPORTS, for type checkers and the API reference
    # spelled from the root (..catalog._types), as the table names them: one lazy mechanism
    # resolves every namespace's table against pando_runtime
    from .._contract._errors import (
        CatalogNotInstalled,
        CatalogRefused,
        CatalogUnavailable,
        UnknownCatalog,
    )
    from ..catalog._bundles import BundleSource, bundle_service_name
    from ..catalog._registry import (
        CATALOG_ENTRY_POINT_GROUP,
        available_catalogs,
        load_catalog,
        register_catalog,
    )
    from ..catalog._singleton import CATALOG_SINGLETON, sync_as_singleton
    from ..catalog._sync import (
        CATALOG_OWNER_TAG,
        CATALOG_WRITER_META,
        CatalogSyncer,
        SyncChange,
        SyncChangeKind,
        SyncStatus,
    )
    from ..catalog._types import (
        CATALOG_NODE,
        BatchCatalogBackend,
        CatalogBackend,
        CatalogInfo,
        CatalogRegistration,
        CatalogWrite,
        Syncer,
    )

# Every public name of this namespace, by the private module that defines it.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "catalog._types": (
        "CATALOG_NODE",
        "BatchCatalogBackend",
        "CatalogBackend",
        "CatalogInfo",
        "CatalogRegistration",
        "CatalogWrite",
        "Syncer",
    ),
    "catalog._bundles": ("BundleSource", "bundle_service_name"),
    "catalog._registry": (
        "CATALOG_ENTRY_POINT_GROUP",
        "available_catalogs",
        "load_catalog",
        "register_catalog",
    ),
    "catalog._singleton": ("CATALOG_SINGLETON", "sync_as_singleton"),
    "catalog._sync": (
        "CATALOG_OWNER_TAG",
        "CATALOG_WRITER_META",
        "CatalogSyncer",
        "SyncChange",
        "SyncChangeKind",
        "SyncStatus",
    ),
    "_contract._errors": (
        "CatalogNotInstalled",
        "CatalogRefused",
        "CatalogUnavailable",
        "UnknownCatalog",
    ),
}

__all__ = [
    "CATALOG_ENTRY_POINT_GROUP",
    "CATALOG_NODE",
    "CATALOG_OWNER_TAG",
    "CATALOG_SINGLETON",
    "CATALOG_WRITER_META",
    "BatchCatalogBackend",
    "BundleSource",
    "CatalogBackend",
    "CatalogInfo",
    "CatalogNotInstalled",
    "CatalogRefused",
    "CatalogRegistration",
    "CatalogSyncer",
    "CatalogUnavailable",
    "CatalogWrite",
    "SyncChange",
    "SyncChangeKind",
    "SyncStatus",
    "Syncer",
    "UnknownCatalog",
    "available_catalogs",
    "bundle_service_name",
    "load_catalog",
    "register_catalog",
    "sync_as_singleton",
]

__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS, globals())
