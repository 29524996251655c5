"""Consul as a pando-runtime catalog backend.

Load it by name (``pando_runtime.catalog.load_catalog("consul", {...})``) or build
:class:`ConsulCatalog` from a :class:`ConsulConfig`. Importing this package does not
import httpx: :class:`ConsulCatalog` is resolved on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._info import CONSUL, ConsulConfig

if TYPE_CHECKING:
    from ._backend import ConsulCatalog

__all__ = ["CONSUL", "ConsulCatalog", "ConsulConfig"]


def __getattr__(name: str) -> Any:
    if name == "ConsulCatalog":
        return importlib.import_module("._backend", __name__).ConsulCatalog
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
