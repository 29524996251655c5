"""The Kubernetes adapter of pando-runtime, and the clusters it talks to.

Load the adapter by name (``pando_runtime.load_adapter("kubernetes", {...})``) or
import :class:`KubernetesAdapter` from here. :class:`Controller` watches a
:class:`Resource` and calls back per key (the adapter's own watch loop, public).
:class:`ClusterSet` loads every
cluster of the kubeconfig files (and in-cluster); a :class:`Cluster` requests
service-account tokens and acts as a service account; :class:`KubeTransport`
is the counted, rate-limited transport over one cluster.

Importing this package does not import the Kubernetes client: those names are
resolved on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._info import ADAPTER, KubernetesConfig

if TYPE_CHECKING:
    from ._adapter import KubernetesAdapter
    from ._catalog_services import ServiceSource, ServiceSyncOptions
    from ._client import KubeTransport
    from ._clusters import IN_CLUSTER, ApiRate, Cluster, ClusterProblem, ClusterSet
    from ._controller import Controller, Resource
    from ._tokens import ServiceAccountToken

__all__ = [
    "ADAPTER",
    "IN_CLUSTER",
    "ApiRate",
    "Cluster",
    "ClusterProblem",
    "ClusterSet",
    "Controller",
    "KubeTransport",
    "KubernetesAdapter",
    "KubernetesConfig",
    "Resource",
    "ServiceAccountToken",
    "ServiceSource",
    "ServiceSyncOptions",
]

_LAZY = {
    "KubernetesAdapter": "._adapter",
    "KubeTransport": "._client",
    "IN_CLUSTER": "._clusters",
    "ApiRate": "._clusters",
    "Cluster": "._clusters",
    "ClusterProblem": "._clusters",
    "ClusterSet": "._clusters",
    "Controller": "._controller",
    "Resource": "._controller",
    "ServiceAccountToken": "._tokens",
    "ServiceSource": "._catalog_services",
    "ServiceSyncOptions": "._catalog_services",
}


def __getattr__(name: str) -> Any:
    # Lazy: these modules import ``kubernetes``, which listing adapters must not pay for.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
