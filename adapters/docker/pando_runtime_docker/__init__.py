"""The Docker adapter of pando-runtime: each app on a bridge network of its own.

Load it by name (``pando_runtime.load_adapter("docker", {...})``) or import
:class:`DockerAdapter` from here. The package's layers (``api``, ``cache``, ``manifests``,
``features``) are private: their paths may change; what is here is the public API.

Importing this package does not import httpx: the adapter is resolved on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._info import ADAPTER, DockerConfig, UpstreamMode

if TYPE_CHECKING:
    from ._adapter import DockerAdapter
    from .api._transport import TransportStats

__all__ = ["ADAPTER", "DockerAdapter", "DockerConfig", "TransportStats", "UpstreamMode"]

_LAZY = {
    "DockerAdapter": "._adapter",
    "TransportStats": ".api._transport",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
