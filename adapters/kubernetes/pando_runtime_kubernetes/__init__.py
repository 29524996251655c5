"""The Kubernetes adapter of pando-runtime, and the clusters it talks to.

Load the adapter by name (``pando_runtime.load_adapter("kubernetes", {...})``) or
import :class:`KubernetesAdapter` (one cluster) or :class:`MultiClusterAdapter` (apps placed
over several) from here. :class:`Controller` watches a :class:`Resource` (or any
:class:`ListWatchSource`) and calls back per key (the adapter's own watch loop, public).
:class:`ClusterSet` loads every cluster of the kubeconfig files (and in-cluster); a
:class:`Cluster` requests service-account tokens and acts as a service account;
:class:`KubeTransport` is the counted, rate-limited transport over one cluster, raising
:class:`ApiError`.

The package's layers (``api``, ``cache``, ``manifests``, ``features``, ``controllers``) are
private: their paths may change; what is here is the public API.

Importing this package imports none of its modules: each name's module is imported on the
name's first use (``_EXPORTS``, the core's own mechanism), and the Kubernetes client only with
the first cluster loaded, its WebSocket stack with the first exec.
"""

from __future__ import annotations

from pando_runtime.plugin import lazy_attributes

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing; type checkers read True
if TYPE_CHECKING:  # the same names as _EXPORTS, for type checkers and the API reference
    from ._adapter import KubernetesAdapter
    from ._info import ADAPTER, MULTI_ADAPTER, KubernetesConfig, MultiClusterConfig
    from ._multi import MultiClusterAdapter
    from .api._clusters import IN_CLUSTER, ApiRate, Cluster, ClusterProblem, ClusterSet
    from .api._errors import ApiError
    from .api._tokens import ServiceAccountToken
    from .api._transport import KubeTransport, TransportStats
    from .cache._watch import ListWatchSource
    from .controllers._catalog_services import ServiceSource, ServiceSyncOptions
    from .controllers._controller import Controller, Resource

# Every public name, by the private module that defines it (imported on the name's first use).
_EXPORTS: dict[str, tuple[str, ...]] = {
    "_adapter": ("KubernetesAdapter",),
    "_info": ("ADAPTER", "MULTI_ADAPTER", "KubernetesConfig", "MultiClusterConfig"),
    "_multi": ("MultiClusterAdapter",),
    "api._clusters": ("IN_CLUSTER", "ApiRate", "Cluster", "ClusterProblem", "ClusterSet"),
    "api._errors": ("ApiError",),
    "api._tokens": ("ServiceAccountToken",),
    "api._transport": ("KubeTransport", "TransportStats"),
    "cache._watch": ("ListWatchSource",),
    "controllers._catalog_services": ("ServiceSource", "ServiceSyncOptions"),
    "controllers._controller": ("Controller", "Resource"),
}

__all__ = [
    "ADAPTER",
    "IN_CLUSTER",
    "MULTI_ADAPTER",
    "ApiError",
    "ApiRate",
    "Cluster",
    "ClusterProblem",
    "ClusterSet",
    "Controller",
    "KubeTransport",
    "KubernetesAdapter",
    "KubernetesConfig",
    "ListWatchSource",
    "MultiClusterAdapter",
    "MultiClusterConfig",
    "Resource",
    "ServiceAccountToken",
    "ServiceSource",
    "ServiceSyncOptions",
    "TransportStats",
]

__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS, globals())
