"""Conformance: capacity and largest fit."""

from __future__ import annotations

import pytest

from ..._contract._capabilities import Capability
from ..._contract._errors import CapacityExceeded, NotFound
from ..._contract._plans import Resources
from ..._contract._refs import BundleRef
from ._base import ConformanceBase, Kit, requires, since

__all__ = ["CapacityConformance"]


class CapacityConformance(ConformanceBase):
    """Capacity and largest fit agree with each other and with what runs."""

    @since("1.0")
    async def test_capacity_is_consistent(self, kit: Kit) -> None:
        async with kit.adapter.read_scope():
            capacity = await kit.adapter.capacity()
        assert capacity.total_cpu_millis > 0
        assert capacity.total_memory_bytes > 0
        assert capacity.reported_at.tzinfo is not None
        if capacity.largest_fit is not None:
            assert 0 <= capacity.largest_fit.cpu_millis <= capacity.total_cpu_millis
            assert 0 <= capacity.largest_fit.memory_bytes <= capacity.total_memory_bytes

    @since("1.0")
    @requires(Capability.RESOURCE_LIMITS)
    async def test_largest_fit_counts_the_bundles_own_use_as_free(self, kit: Kit) -> None:
        plan = kit.plan(
            kit.workload("web", resources=Resources(cpu_millis=500, memory_bytes=256 * 1024**2))
        )
        await kit.applied_and_running(plan)
        async with kit.adapter.read_scope():
            capacity = await kit.adapter.capacity()
            own = await kit.adapter.largest_fit_for(plan.bundle_id)
            other = await kit.adapter.largest_fit_for(kit.new_id("other"))
        if capacity.largest_fit is None:
            assert own is None
            return
        assert own is not None
        assert other is not None
        # What the bundle holds counts as free: it fits again where it runs now.
        assert own.memory_bytes >= 256 * 1024**2
        if self.single_pool:
            assert own.memory_bytes >= other.memory_bytes
            assert own.memory_bytes >= capacity.largest_fit.memory_bytes

    @since("1.0")
    @requires(Capability.RESOURCE_LIMITS)
    async def test_plan_larger_than_any_place_is_refused(self, kit: Kit) -> None:
        capacity = await kit.adapter.capacity()
        too_big = Resources(
            cpu_millis=capacity.total_cpu_millis * 4, memory_bytes=capacity.total_memory_bytes * 4
        )
        plan = kit.plan(kit.workload("huge", resources=too_big))
        kit.track(plan.bundle_id)
        refused: CapacityExceeded | None = None
        try:
            await kit.adapter.apply(plan)
        except CapacityExceeded as error:
            refused = error
        if refused is not None:
            assert refused.code == "CAPACITY_EXCEEDED"
        else:
            observed = await kit.observe(plan)
            assert not observed.workloads[0].running, "a workload beyond capacity cannot run"

    @since("1.0")
    @requires(Capability.REPORTS_USAGE, Capability.MULTIPLE_WORKLOADS)
    async def test_usage_reports_every_workload(self, kit: Kit) -> None:
        plan = kit.plan(kit.workload("web"), kit.workload("worker"))
        await kit.applied_and_running(plan)
        usage = await kit.adapter.usage(BundleRef(plan.bundle_id))
        assert usage.bundle_id == plan.bundle_id
        assert usage.reported_at.tzinfo is not None
        assert {w.workload for w in usage.workloads} == {"web", "worker"}
        for workload in usage.workloads:
            assert workload.running
            # -1: running but not measured yet (a sampling runtime may need a moment).
            assert workload.cpu_millis >= -1
            assert workload.memory_bytes >= -1
        total = await kit.adapter.in_use()
        assert total.cpu_millis >= 0
        assert total.memory_bytes >= 0
        assert total.reported_at.tzinfo is not None

    @since("1.0")
    @requires(Capability.REPORTS_USAGE)
    async def test_usage_of_an_unknown_bundle_is_not_found(self, kit: Kit) -> None:
        with pytest.raises(NotFound):
            await kit.adapter.usage(BundleRef(kit.new_id("absent")))

    @since("1.0")
    @requires(Capability.REPORTS_USAGE)
    async def test_usage_of_a_destroyed_bundle_is_not_found(self, kit: Kit) -> None:
        plan = kit.plan(kit.workload("web"))
        await kit.applied_and_running(plan)
        await kit.adapter.destroy(BundleRef(plan.bundle_id))
        with pytest.raises(NotFound):
            await kit.adapter.usage(BundleRef(plan.bundle_id))
