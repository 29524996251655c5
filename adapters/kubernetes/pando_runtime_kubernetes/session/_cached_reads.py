"""A session's reads of our objects in a namespace: the cache when synced, else the API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import anyio

from .._names import LABEL_MANAGED_BY, LABEL_ROLE, MANAGED_BY, MANAGED_SELECTOR, ROLE_EGRESS_GATEWAY
from ..api._paths import api_path
from ..cache._projections import (
    ClaimFacts,
    GatewayFacts,
    NamespaceFacts,
    PodFacts,
    project_claim,
    project_gateway,
    project_namespace,
    project_pod,
)
from ._api_reads import ApiReads
from ._cluster_cache import ClusterCache

__all__ = ["CachedReads"]

T = TypeVar("T")


class CachedReads:
    """Our objects of one cluster by namespace, from the cache or (not synced) the API."""

    def __init__(self, cache: ClusterCache, api: ApiReads) -> None:
        self._cache = cache
        self._api = api

    async def namespace(self, ns: str) -> NamespaceFacts | None:
        """A namespace's facts; one not made by us has no bundle id."""
        informer = await self._cache.synced()
        if informer is not None:
            return informer.namespaces.by_name.get(ns)
        body = await self._api.find(api_path(None, "namespaces", ns), f"read namespace {ns}")
        if body is None:
            return None
        if (body.get("metadata", {}).get("labels") or {}).get(LABEL_MANAGED_BY) != MANAGED_BY:
            return NamespaceFacts(ns, None, (), digest=None, terminating=False, version=0)
        return project_namespace(body)

    async def list_managed(self, ns: str, plural: str, what: str) -> list[dict[str, Any]]:
        """Our objects of a kind in ``ns``, read from the API (when the cache cannot answer)."""
        body = await self._api.get(api_path(ns, plural), what, labelSelector=MANAGED_SELECTOR)
        return list(body.get("items") or ())

    async def pods(self, ns: str) -> list[PodFacts]:
        """Our pods in ``ns``."""
        informer = await self._cache.synced()
        if informer is not None:
            return informer.pods.pods(ns)
        items = await self.list_managed(ns, "pods", f"list pods of {ns}")
        return [f for f in map(project_pod, items) if f is not None]

    async def gateways(self, ns: str) -> list[GatewayFacts]:
        """Our egress gateway pods in ``ns``."""
        informer = await self._cache.synced()
        if informer is not None:
            return informer.gateways.gateways(ns)
        body = await self._api.get(
            api_path(ns, "pods"),
            f"list the egress gateway of {ns}",
            labelSelector=f"{MANAGED_SELECTOR},{LABEL_ROLE}={ROLE_EGRESS_GATEWAY}",
        )
        return [f for f in map(project_gateway, body.get("items") or ()) if f is not None]

    async def services(self, ns: str) -> set[str]:
        """Names of our Services in ``ns``."""
        informer = await self._cache.synced()
        if informer is not None:
            return set(informer.services.names(ns))
        items = await self.list_managed(ns, "services", f"list services of {ns}")
        return {(i.get("metadata") or {}).get("name", "") for i in items}

    async def claims(self, ns: str) -> list[ClaimFacts]:
        """Our volume claims in ``ns``."""
        informer = await self._cache.synced()
        if informer is not None:
            return informer.claims.claims(ns)
        items = await self.list_managed(ns, "persistentvolumeclaims", f"list the volumes of {ns}")
        return [f for f in map(project_claim, items) if f is not None]

    async def wait_for(
        self,
        ns: str,
        check: Callable[[list[PodFacts]], T | None],
        timeout: float,  # noqa: ASYNC109 - a bound on polling, not a call timeout
    ) -> T | None:
        """Poll ``check`` on the namespace's pods (woken by the cache) until it answers."""
        with anyio.move_on_after(timeout):
            while True:
                result = check(await self.pods(ns))
                if result is not None:
                    return result
                informer = self._cache.informer
                if informer is not None and informer.synced:
                    with anyio.move_on_after(1.0):
                        await informer.pods.changed.wait()
                else:
                    await anyio.sleep(0.5)
        return None
