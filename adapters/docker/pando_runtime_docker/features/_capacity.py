"""Capacity and room: the daemon's machine (``GET /info``) less what this owner's apps hold.

The engine is one place. Its room is its CPUs and memory less the limits of this owner's
containers that hold room (running, or created and not started yet: see
:attr:`~..cache.ContainerView.holds_room`), read from the view, so a room read makes no call
(``GET /info`` once per adapter). A container without limits reserves nothing and takes nothing
from the room, as a pod without requests; the engine enforces no reservation, so the room is
what this owner has promised its apps, not what they use, and other owners' containers on the
same engine are not counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pando_runtime import BundlePlan, Capacity, CapacityExceeded, Fit
from pando_runtime.fleet import BundleRequests, Request, room_left

from ..api import EngineTransport
from ..cache import ContainerCache

__all__ = ["EngineCapacity", "engine_room", "share_of"]

_NOTHING: Request = (0, 0)


def engine_room(total: Request, held: Mapping[str, Request], own: str | None = None) -> Fit:
    """``total`` less what every bundle of ``held`` holds, bundle ``own``'s counted free."""
    whole = Fit(cpu_millis=total[0], memory_bytes=total[1])
    return room_left(whole, *(taken for bundle_id, taken in held.items() if bundle_id != own))


def share_of(machine: Request, share: tuple[int | None, int | None]) -> Request:
    """What an owner's apps may take: each part of ``share`` that is set, else the machine's.

    A share may be less than the machine (the rest kept for the system, or other owners) or
    more (limits are ceilings, not reservations: an operator may promise more than there is).
    """
    cpu, memory = (
        whole if part is None else part for whole, part in zip(machine, share, strict=True)
    )
    return cpu, memory


class EngineCapacity:
    """The daemon's size, read once (it does not change while the daemon runs), and its room.

    ``share``: the CPU and memory this owner's apps may take, an operator's setting (``None``:
    the machine's).
    """

    def __init__(
        self,
        api: EngineTransport,
        cache: ContainerCache,
        share: tuple[int | None, int | None] = (None, None),
    ) -> None:
        self._api = api
        self._cache = cache
        self._share = share
        self._info: dict[str, Any] | None = None

    async def info(self) -> dict[str, Any]:
        """``GET /info``, once."""
        if self._info is None:
            self._info = dict(await self._api.get_json("/info"))
        return self._info

    async def totals(self) -> tuple[int, int]:
        """CPU (millis) and memory (bytes) of the daemon's machine, or the share set."""
        info = await self.info()
        machine = (int(info.get("NCPU", 0)) * 1000, int(info.get("MemTotal", 0)))
        return share_of(machine, self._share)

    async def capacity(self) -> Capacity:
        """The daemon's machine, and its room for a new bundle as ``largest_fit``."""
        cpu, memory = await self.totals()
        self._cache.confirmed_at()  # the room is the view's: never older than its bound
        running = sum(1 for c in self._cache.all_containers() if c.running)
        info = await self.info()
        return Capacity(
            total_cpu_millis=cpu,
            total_memory_bytes=memory,
            reported_at=datetime.now(UTC),
            running_workloads=running,
            largest_fit=engine_room((cpu, memory), self._cache.limits_by_bundle()),
            details={
                "server_version": str(info.get("ServerVersion", "")),
                "api_version": await self._api.version(),
            },
        )

    async def largest_fit_for(self, bundle_id: str) -> Fit:
        """The engine's room for ``bundle_id``, its own containers' limits counted free."""
        total = await self.totals()
        # Asked to place an app: the view within its bound, and the daemon answers now
        # (one probe), else an engine that hangs would be given apps it never runs.
        await self._cache.answers_now()
        return engine_room(total, self._cache.limits_by_bundle(), bundle_id)

    def requests_by_bundle(self) -> dict[str, BundleRequests]:
        """What each bundle's containers hold of the room, from the view (no call).

        All ``placed``: a container runs where it is created, so nothing waits for a place.
        """
        return {
            bundle_id: BundleRequests(placed=held, waiting=_NOTHING)
            for bundle_id, held in self._cache.limits_by_bundle().items()
        }

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
                    f"workload {workload.name!r} asks for more than the Docker host has for "
                    "this adapter's apps",
                    details={
                        "bundle_id": plan.bundle_id,
                        "workload": workload.name,
                        "cpu_millis": wants_cpu,
                        "memory_bytes": wants_memory,
                        "host_cpu_millis": cpu,
                        "host_memory_bytes": memory,
                    },
                )
