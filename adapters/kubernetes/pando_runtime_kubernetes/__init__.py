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

Importing this package does not import the Kubernetes client: those names are
resolved on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._info import ADAPTER, MULTI_ADAPTER, KubernetesConfig, MultiClusterConfig

if TYPE_CHECKING:
    from ._adapter import KubernetesAdapter
    from ._multi import MultiClusterAdapter
    from .api._clusters import IN_CLUSTER, ApiRate, Cluster, ClusterProblem, ClusterSet
    from .api._errors import ApiError
    from .api._tokens import ServiceAccountToken
    from .api._transport import KubeTransport, TransportStats
    from .cache._watch import ListWatchSource
    from .controllers._catalog_services import ServiceSource, ServiceSyncOptions
    from .controllers._controller import Controller, Resource

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

_LAZY = {
    "KubernetesAdapter": "._adapter",
    "MultiClusterAdapter": "._multi",
    "ApiError": ".api._errors",
    "KubeTransport": ".api._transport",
    "TransportStats": ".api._transport",
    "IN_CLUSTER": ".api._clusters",
    "ApiRate": ".api._clusters",
    "Cluster": ".api._clusters",
    "ClusterProblem": ".api._clusters",
    "ClusterSet": ".api._clusters",
    "ServiceAccountToken": ".api._tokens",
    "ListWatchSource": ".cache._watch",
    "Controller": ".controllers._controller",
    "Resource": ".controllers._controller",
    "ServiceSource": ".controllers._catalog_services",
    "ServiceSyncOptions": ".controllers._catalog_services",
}


def __getattr__(name: str) -> Any:
    # Lazy: these modules import ``kubernetes``, which listing adapters must not pay for.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
