"""Capacity and usage, as the runtime reports them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

import attrs

from .._util._frozen import frozen_mapping, frozen_tuple

__all__ = ["BundleUsage", "Capacity", "Fit", "InUse", "VolumeUsage", "WorkloadUsage", "roomiest"]


@attrs.frozen(kw_only=True)
class Fit:
    """Room in one place: the most a single bundle placed there could use."""

    cpu_millis: int
    memory_bytes: int

    def holds(self, cpu_millis: int, memory_bytes: int) -> bool:
        """Whether a request of that size fits here."""
        return cpu_millis <= self.cpu_millis and memory_bytes <= self.memory_bytes

    @property
    def roominess(self) -> tuple[int, int]:
        """The order of "roomiest": memory first (what runs out), then CPU."""
        return (self.memory_bytes, self.cpu_millis)


def roomiest(fits: Iterable[Fit]) -> Fit | None:
    """The roomiest of ``fits`` by :attr:`Fit.roominess` (``None`` when there are none).

    The one ordering every adapter uses for ``largest_fit`` and for placing by room.
    """
    return max(fits, key=lambda fit: fit.roominess, default=None)


@attrs.frozen(kw_only=True)
class Capacity:
    """Totals the runtime can give to bundles.

    ``total_disk_bytes`` of 0 means unknown (unchecked); ``running_workloads``
    of -1 means unknown. ``largest_fit`` is the roomiest single place, or
    ``None`` for a runtime that is one place.
    """

    total_cpu_millis: int
    total_memory_bytes: int
    reported_at: datetime
    total_disk_bytes: int = 0
    running_workloads: int = -1
    largest_fit: Fit | None = None
    details: Mapping[str, str] = attrs.field(factory=dict, converter=frozen_mapping)


@attrs.frozen(kw_only=True)
class InUse:
    """What all bundles use right now, summed (workloads not measured yet are left out)."""

    cpu_millis: int
    memory_bytes: int
    reported_at: datetime


@attrs.frozen(kw_only=True)
class WorkloadUsage:
    """One workload's use now.

    A limit of ``None`` means unlimited. -1 means unknown: ``disk_bytes`` where the runtime
    cannot tell, ``cpu_millis`` and ``memory_bytes`` of a running workload not measured yet.
    A workload that does not run uses 0.
    """

    workload: str
    running: bool
    cpu_millis: int
    memory_bytes: int
    cpu_limit_millis: int | None = None
    memory_limit_bytes: int | None = None
    disk_bytes: int = -1


@attrs.frozen(kw_only=True)
class VolumeUsage:
    """Bytes a volume holds (-1 when the runtime cannot tell)."""

    volume_id: str
    bytes: int = -1


@attrs.frozen(kw_only=True)
class BundleUsage:
    """A bundle's use now, per workload and volume."""

    bundle_id: str
    reported_at: datetime
    workloads: tuple[WorkloadUsage, ...] = attrs.field(default=(), converter=frozen_tuple)
    volumes: tuple[VolumeUsage, ...] = attrs.field(default=(), converter=frozen_tuple)
