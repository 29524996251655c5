"""The Docker adapter of pando-runtime: each app on a bridge network of its own.

Load it by name (``pando_runtime.load_adapter("docker", {...})``) or import
:class:`DockerAdapter` from here. The package's layers (``api``, ``cache``, ``manifests``,
``features``) are private: their paths may change; what is here is the public API.

Importing this package imports none of its modules: each name's module is imported on the
name's first use (``_EXPORTS``, the core's own mechanism), so listing adapters or reading the
settings never imports httpx.
"""

from __future__ import annotations

from pando_runtime.plugin import lazy_attributes

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing; type checkers read True
if TYPE_CHECKING:  # the same names as _EXPORTS, for type checkers and the API reference
    from ._adapter import DockerAdapter
    from ._info import ADAPTER, DockerConfig, UpstreamMode
    from .api._transport import TransportStats

# Every public name, by the private module that defines it (imported on the name's first use).
_EXPORTS: dict[str, tuple[str, ...]] = {
    "_adapter": ("DockerAdapter",),
    "_info": ("ADAPTER", "DockerConfig", "UpstreamMode"),
    "api._transport": ("TransportStats",),
}

__all__ = ["ADAPTER", "DockerAdapter", "DockerConfig", "TransportStats", "UpstreamMode"]

__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS, globals())
