"""Capacity of one cluster: eligible nodes' room, read from nodes and live pods.

The arithmetic is in :mod:`._capacity`; this reads what it needs, once per read scope (a host
asking ``capacity`` and ``largest_fit_for`` of many apps in one scope lists nodes and pods once).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pando_runtime import Capacity, Fit, scoped_read

from ._capacity import NodeRoom, node_rooms
from ._info import KubernetesConfig
from ._names import namespace_for
from ._session import ClusterSession

__all__ = ["LIVE_PODS", "ClusterCapacity", "largest_fit"]

LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
PAGE = 500


def largest_fit(rooms: list[NodeRoom], ns: str | None) -> Fit:
    """The roomiest node (by memory, then CPU), ``ns``'s own pods counted as free."""
    best = (0, 0)
    for room in rooms:
        cpu, mem = room.free(ns)
        best = max(best, (max(mem, 0), max(cpu, 0)))
    return Fit(cpu_millis=best[1], memory_bytes=best[0])


class ClusterCapacity:
    """``capacity`` and ``largest_fit_for`` of one cluster."""

    def __init__(self, session: ClusterSession, config: KubernetesConfig) -> None:
        self._session = session
        self._config = config

    async def rooms(self) -> list[NodeRoom]:
        """Every eligible node's room (shared inside a read scope)."""

        async def read() -> list[NodeRoom]:
            session = self._session
            nodes = await session.get("/api/v1/nodes", "list nodes")
            pods: list[dict[str, Any]] = []
            token: str | None = None
            while True:
                page = await session.get(
                    "/api/v1/pods",
                    "list pods",
                    limit=PAGE,
                    fieldSelector=LIVE_PODS,
                    **{"continue": token},
                )
                pods.extend(page.get("items") or ())
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    break
            return node_rooms(nodes.get("items") or (), pods, self._config.node_selector)

        return await scoped_read(("pando-runtime-kubernetes.rooms", id(self)), read)

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
