"""Capacity from the daemon's ``GET /info``: one place, its CPUs and memory."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pando_runtime import BundlePlan, Capacity, CapacityExceeded

from ..api import EngineTransport
from ..cache import ContainerCache

__all__ = ["EngineCapacity"]


class EngineCapacity:
    """The daemon's size, read once (it does not change while the daemon runs)."""

    def __init__(self, api: EngineTransport, cache: ContainerCache) -> None:
        self._api = api
        self._cache = cache
        self._info: dict[str, Any] | None = None

    async def info(self) -> dict[str, Any]:
        """``GET /info``, once."""
        if self._info is None:
            self._info = dict(await self._api.get_json("/info"))
        return self._info

    async def totals(self) -> tuple[int, int]:
        """CPU (millis) and memory (bytes) of the daemon's machine."""
        info = await self.info()
        return int(info.get("NCPU", 0)) * 1000, int(info.get("MemTotal", 0))

    async def capacity(self) -> Capacity:
        """What the daemon can give bundles: one place (no largest fit)."""
        cpu, memory = await self.totals()
        running = sum(1 for c in self._cache.all_containers() if c.running)
        info = await self.info()
        return Capacity(
            total_cpu_millis=cpu,
            total_memory_bytes=memory,
            reported_at=datetime.now(UTC),
            running_workloads=running,
            largest_fit=None,
            details={
                "server_version": str(info.get("ServerVersion", "")),
                "api_version": await self._api.version(),
            },
        )

    async def check_fits(self, plan: BundlePlan) -> None:
        """Refuse a plan with a workload larger than the whole machine; writes nothing."""
        if not any(
            w.resources.cpu_millis is not None or w.resources.memory_bytes is not None
            for w in plan.workloads
        ):
            return
        cpu, memory = await self.totals()
        for workload in plan.workloads:
            wants_cpu = workload.resources.cpu_millis or 0
            wants_memory = workload.resources.memory_bytes or 0
            if wants_cpu > cpu or wants_memory > memory:
                raise CapacityExceeded(
                    f"workload {workload.name!r} asks for more than the Docker host has",
                    details={
                        "bundle_id": plan.bundle_id,
                        "workload": workload.name,
                        "cpu_millis": wants_cpu,
                        "memory_bytes": wants_memory,
                        "host_cpu_millis": cpu,
                        "host_memory_bytes": memory,
                    },
                )
