"""Capacity of one cluster: eligible nodes' room, read from nodes and live pods.

The arithmetic is in :mod:`._capacity`; this reads what it needs, once per read scope (a host
asking ``capacity`` and ``largest_fit_for`` of many apps in one scope lists nodes and pods once).
The apps' own pods come from the lean cache when it runs; only the pods it does not hold are
listed: everyone else's, and the adapter's helpers (every pod the adapter writes carries
either a workload label, and is cached, or a role label). With 10,000 apps that is a few small
pages instead of every pod of the cluster, whole.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pando_runtime import Capacity, Fit
from pando_runtime.plugin import roomiest, scoped_read

from .._info import KubernetesConfig
from .._names import LABEL_MANAGED_BY, LABEL_ROLE, MANAGED_BY, MANAGED_SELECTOR, namespace_for
from ..api._transport import KubeTransport
from ..cache._capacity import NodeRoom, Reservation, node_rooms, pod_reservation
from ..cache._list_watch import ApiListWatch
from ..cache._watch import Gone
from ..session._session import ClusterSession

__all__ = ["LIVE_PODS", "ClusterCapacity", "largest_fit"]

LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
PAGE = 500
NOT_OURS = f"{LABEL_MANAGED_BY}!={MANAGED_BY}"
OUR_HELPERS = f"{MANAGED_SELECTOR},{LABEL_ROLE}"


def largest_fit(rooms: list[NodeRoom], ns: str | None) -> Fit:
    """The roomiest node (:func:`~pando_runtime.plugin.roomiest`), ``ns``'s own pods free.

    No eligible node: no room at all (a fit of zero).
    """
    fits = (
        Fit(cpu_millis=max(cpu, 0), memory_bytes=max(mem, 0))
        for cpu, mem in (room.free(ns) for room in rooms)
    )
    return roomiest(fits) or Fit(cpu_millis=0, memory_bytes=0)


class ClusterCapacity:
    """``capacity`` and ``largest_fit_for`` of one cluster."""

    def __init__(self, session: ClusterSession, config: KubernetesConfig) -> None:
        self._session = session
        self._config = config

    async def rooms(self) -> list[NodeRoom]:
        """Every eligible node's room (shared inside a read scope)."""

        async def read() -> list[NodeRoom]:
            nodes = await self._session.api.get("/api/v1/nodes", "list nodes")
            reservations = await self._reservations()
            return node_rooms(nodes.get("items") or (), reservations, self._config.node_selector)

        return await scoped_read(("pando-runtime-kubernetes.rooms", id(self)), read)

    async def _reservations(self) -> list[Reservation]:
        cache = await self._session.cache.synced()
        if cache is None:
            return await self._listed(None)
        listed = await self._listed(NOT_OURS) + await self._listed(OUR_HELPERS)
        return listed + list(cache.pods.reservations())

    async def _listed(self, label_selector: str | None) -> list[Reservation]:
        """What the live pods ``label_selector`` picks reserve, read page by page."""

        async def read(api: KubeTransport) -> list[Reservation]:
            pods = ApiListWatch(
                api,
                "/api/v1/pods",
                label_selector=label_selector,
                field_selector=LIVE_PODS,
                page_size=PAGE,
            )
            while True:
                try:
                    reservations, _ = await pods.list(pod_reservation)
                except Gone:  # the continue token expired mid-way: the list starts over
                    continue
                return reservations

        return await self._session.api.read("list pods", read)

    async def capacity(self) -> Capacity:
        """Eligible nodes' allocatable minus what other pods request; the roomiest node."""
        rooms = await self.rooms()
        return Capacity(
            total_cpu_millis=sum(r.cpu_millis - r.other_cpu for r in rooms),
            total_memory_bytes=sum(r.memory_bytes - r.other_memory for r in rooms),
            reported_at=datetime.now(UTC),
            largest_fit=largest_fit(rooms, None),
            details={"nodes": str(len(rooms))},
        )

    async def largest_fit_for(self, bundle_id: str) -> Fit:
        """The roomiest eligible node for ``bundle_id``, its own pods counted as free."""
        return largest_fit(await self.rooms(), namespace_for(bundle_id))
