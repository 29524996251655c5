"""Consul as a pando-runtime catalog backend, and as a lease store.

Load it by name (``pando_runtime.catalog.load_catalog("consul", {...})``) or build
:class:`ConsulCatalog` from a :class:`ConsulConfig`; load the lease store by name too
(``pando_runtime.load_lease_store("consul", {...})``, settings :class:`ConsulLeaseConfig`).
Importing this package does not import httpx: :class:`ConsulCatalog` is resolved on first
access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._info import CONSUL, CONSUL_LEASES, ConsulConfig, ConsulLeaseConfig

if TYPE_CHECKING:
    from ._backend import ConsulCatalog

__all__ = ["CONSUL", "CONSUL_LEASES", "ConsulCatalog", "ConsulConfig", "ConsulLeaseConfig"]


def __getattr__(name: str) -> Any:
    if name == "ConsulCatalog":
        return importlib.import_module("._backend", __name__).ConsulCatalog
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
