"""Write-through: what the adapter just wrote is in the cache before its watch event."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._informer import Informer
from ._projections import project_claim, project_gateway, project_namespace, project_pod

__all__ = ["remember"]


def remember(informer: Informer, body: Mapping[str, Any]) -> None:
    """Put the object the API server returned for a write into ``informer``'s stores.

    An answer older than the object's departure (its watch's DELETED event was handled first)
    is refused by the store (:class:`~pando_runtime_kubernetes.cache._stores.Departures`).
    """
    kind = body.get("kind")
    if kind == "Pod":
        facts = project_pod(body)
        if facts is not None:
            informer.pods.put(facts)
        else:
            gateway = project_gateway(body)
            if gateway is not None:
                informer.gateways.put(gateway)
    elif kind == "Namespace":
        informer.namespaces.put(project_namespace(body))
    elif kind == "Service":
        meta = body.get("metadata") or {}
        informer.services.put(meta.get("namespace", ""), meta.get("name", ""))
    elif kind == "PersistentVolumeClaim":
        claim = project_claim(body)
        if claim is not None:
            informer.claims.put(claim)
