"""Usage: what a bundle's containers use now, from the daemon's one-shot stats and sizes.

Per running container, ``GET /containers/{id}/stats?stream=false`` (the daemon samples twice,
about a second apart, so CPU is a rate over that second) and, per container, an inspect with
sizes (``size=1``: the bytes its writable layer holds, and its limits). A volume's bytes come
from ``GET /system/df``. Containers are read concurrently, a few at a time; a running
container the daemon cannot measure (it just stopped, say) is reported as -1 and left out of
``in_use``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import anyio

from pando_runtime import (
    BundleUsage,
    InUse,
    NotFound,
    PandoRuntimeError,
    VolumeUsage,
    WorkloadUsage,
)

from .._log import logger
from ..api import EngineError, EngineTransport, write_failed
from ..cache import ContainerCache, ContainerView, limits_of

__all__ = ["EngineUsage", "cpu_millis", "memory_bytes"]

_LOG = logger("usage")

UNKNOWN = -1
_CONCURRENT = 4


def cpu_millis(stats: Mapping[str, Any]) -> int:
    """CPU over the sample, in millicores; -1 without two samples."""
    cpu = stats.get("cpu_stats") or {}
    pre = stats.get("precpu_stats") or {}
    values = (
        (cpu.get("cpu_usage") or {}).get("total_usage"),
        (pre.get("cpu_usage") or {}).get("total_usage"),
        cpu.get("system_cpu_usage"),
        pre.get("system_cpu_usage"),
    )
    if any(v is None for v in values):
        return UNKNOWN
    total, pre_total, system, pre_system = (int(v or 0) for v in values)
    cpus = int(
        cpu.get("online_cpus") or len((cpu.get("cpu_usage") or {}).get("percpu_usage") or ())
    )
    if not cpus or system <= pre_system or not pre_total:
        return UNKNOWN  # a single sample: no rate
    share = max(total - pre_total, 0) / (system - pre_system)
    return round(share * cpus * 1000)


def memory_bytes(stats: Mapping[str, Any]) -> int:
    """Memory in use without the page cache (as ``docker stats`` shows it); -1 when absent."""
    memory = stats.get("memory_stats") or {}
    usage = memory.get("usage")
    if usage is None:
        return UNKNOWN
    details = memory.get("stats") or {}
    cache = details.get("total_inactive_file", details.get("inactive_file", details.get("cache")))
    return max(int(usage) - int(cache or 0), 0)


class EngineUsage:
    """``usage`` and ``in_use`` over the cache's containers."""

    def __init__(self, api: EngineTransport, cache: ContainerCache) -> None:
        self._api = api
        self._cache = cache

    async def _stats(self, container: ContainerView) -> tuple[int, int]:
        try:
            stats = await self._api.get_json(
                "/containers/{id}/stats", args={"id": container.id}, params={"stream": False}
            )
        except EngineError as error:
            if error.not_found or error.conflict:
                return UNKNOWN, UNKNOWN
            raise write_failed(
                error, f"reading the stats of workload {container.workload!r}"
            ) from None
        if not (stats.get("memory_stats") or {}):  # the daemon answers zeros once it stopped
            return UNKNOWN, UNKNOWN
        return cpu_millis(stats), memory_bytes(stats)

    async def _workload(self, container: ContainerView) -> WorkloadUsage:
        try:
            data = await self._api.get_json(
                "/containers/{id}/json", args={"id": container.id}, params={"size": True}
            )
        except EngineError as error:
            if not error.not_found:
                raise write_failed(error, f"inspecting workload {container.workload!r}") from None
            data = {}
        host = data.get("HostConfig") or {}
        running = bool((data.get("State") or {}).get("Running", container.running))
        cpu, memory = (await self._stats(container)) if running else (0, 0)
        cpu_limit, memory_limit = limits_of(host)
        size = data.get("SizeRw")
        return WorkloadUsage(
            workload=container.workload,
            running=running,
            cpu_millis=cpu,
            memory_bytes=memory,
            cpu_limit_millis=cpu_limit or None,
            memory_limit_bytes=memory_limit or None,
            disk_bytes=int(size) if size is not None else UNKNOWN,
        )

    async def _each(self, containers: Iterable[ContainerView]) -> list[WorkloadUsage]:
        listed = list(containers)
        results: list[WorkloadUsage | None] = [None] * len(listed)
        limiter = anyio.CapacityLimiter(_CONCURRENT)

        async def one(index: int, container: ContainerView) -> None:
            async with limiter:
                results[index] = await self._workload(container)

        try:
            async with anyio.create_task_group() as group:
                for index, container in enumerate(listed):
                    group.start_soon(one, index, container)
        except BaseExceptionGroup as errors:  # the daemon's refusal as itself, not a group
            coded = [e for e in errors.exceptions if isinstance(e, PandoRuntimeError)]
            if coded:
                raise coded[0] from errors
            raise
        return [r for r in results if r is not None]

    async def _volume_bytes(self, volume_names: Mapping[str, str]) -> dict[str, int]:
        """Bytes each volume holds (by volume id), from the daemon's disk usage."""
        if not volume_names:
            return {}
        df = await self._api.get_json("/system/df")
        sizes = {
            str(v.get("Name")): int((v.get("UsageData") or {}).get("Size", UNKNOWN))
            for v in df.get("Volumes") or ()
        }
        return {vid: sizes.get(name, UNKNOWN) for vid, name in volume_names.items()}

    async def usage(self, bundle_id: str, volume_names: Mapping[str, str]) -> BundleUsage:
        """The bundle's workloads (newest container of each) and volumes now."""
        view = self._cache.bundle(bundle_id)
        if not view.exists:
            raise NotFound(
                f"bundle {bundle_id!r} is not deployed", details={"bundle_id": bundle_id}
            )
        newest = view.newest()
        workloads = await self._each(newest[name] for name in sorted(newest))
        volumes = await self._volume_bytes(volume_names)
        return BundleUsage(
            bundle_id=bundle_id,
            reported_at=datetime.now(UTC),
            workloads=workloads,
            volumes=[VolumeUsage(volume_id=v, bytes=b) for v, b in sorted(volumes.items())],
        )

    async def in_use(self) -> InUse:
        """CPU and memory of every running container of this owner (unmeasured left out)."""
        running = [c for c in self._cache.all_containers() if c.running]
        measured = await self._each(running)
        return InUse(
            cpu_millis=sum(max(w.cpu_millis, 0) for w in measured),
            memory_bytes=sum(max(w.memory_bytes, 0) for w in measured),
            reported_at=datetime.now(UTC),
        )
