"""Write-through: what the adapter just wrote is in the cache before its watch event."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._informer import Informer
from ._projections import project_claim, project_gateway, project_namespace, project_pod

__all__ = ["remember"]


def remember(informer: Informer, body: Mapping[str, Any]) -> None:
    """Put the object the API server returned for a write into ``informer``'s stores.

    A pod on its way out (a delete's answer) only updates what the store holds: its watch
    may have removed it already, and a write's answer must never bring back what a watch
    event removed (no later event would remove it again, and the saved cache would hand
    it to the next start).
    """
    kind = body.get("kind")
    if kind == "Pod":
        facts = project_pod(body)
        if facts is not None:
            (informer.pods.put_if_held if facts.deleting else informer.pods.put)(facts)
        else:
            gateway = project_gateway(body)
            if gateway is not None:
                store = informer.gateways
                (store.put_if_held if gateway.deleting else store.put)(gateway)
    elif kind == "Namespace":
        informer.namespaces.put(project_namespace(body))
    elif kind == "Service":
        meta = body.get("metadata") or {}
        informer.services.put(meta.get("namespace", ""), meta.get("name", ""))
    elif kind == "PersistentVolumeClaim":
        claim = project_claim(body)
        if claim is not None:
            informer.claims.put(claim)
