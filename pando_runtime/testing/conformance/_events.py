"""Conformance: the bundle event stream."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio

from ..._contract._capabilities import Capability
from ..._contract._events import BundleEvent, BundleEventKind
from ..._contract._refs import BundleRef
from ._base import ConformanceBase, Kit, since

__all__ = ["EventConformance"]


async def _next_matching(
    events: AsyncIterator[BundleEvent], kit: Kit, bundle_id: str | None, *kinds: BundleEventKind
) -> BundleEvent:
    with anyio.fail_after(kit.harness.timeout):
        async for event in events:
            if event.kind in kinds and (bundle_id is None or event.bundle_id == bundle_id):
                return event
    msg = "the event stream ended"
    raise AssertionError(msg)


async def _drain(events: AsyncIterator[BundleEvent], kit: Kit) -> list[BundleEvent]:
    """Every event that arrives within the quiet period."""
    seen: list[BundleEvent] = []
    with anyio.move_on_after(kit.harness.quiet_period):
        async for event in events:
            seen.append(event)  # noqa: PERF401 - keeps what came before the timeout
    return seen


class EventConformance(ConformanceBase):
    """``watch_bundles``: WATCHING first, one event per transition, MISSED on a gap."""

    gate = (Capability.BUNDLE_EVENTS,)

    @since("1.0")
    async def test_first_event_is_watching(self, kit: Kit) -> None:
        async with kit.adapter.watch_bundles() as events:
            with anyio.fail_after(kit.harness.timeout):
                first = await anext(events)
        assert first.kind is BundleEventKind.WATCHING
        assert first.bundle_id is None

    @since("1.0")
    async def test_start_exit_and_removal_are_reported_once(self, kit: Kit) -> None:
        kit.needs("end_workload")
        plan = kit.plan()
        async with kit.adapter.watch_bundles() as events:
            await _next_matching(events, kit, None, BundleEventKind.WATCHING)
            await kit.apply(plan)
            started = await _next_matching(events, kit, plan.bundle_id, BundleEventKind.STARTED)
            assert started.workload == "web"
            await kit.running(plan)
            await kit.harness_call(kit.harness.end_workload(kit.adapter, kit.ref(plan), 4))
            exited = await _next_matching(
                events, kit, plan.bundle_id, BundleEventKind.EXITED, BundleEventKind.OOM_KILLED
            )
            assert exited.kind is BundleEventKind.EXITED
            assert exited.workload == "web"
            assert exited.exit_code == 4
            extra = [
                e
                for e in await _drain(events, kit)
                if e.bundle_id == plan.bundle_id and e.kind is BundleEventKind.EXITED
            ]
            assert extra == [], "one transition, one event"
            await kit.adapter.destroy(BundleRef(plan.bundle_id))
            removed = await _next_matching(events, kit, plan.bundle_id, BundleEventKind.REMOVED)
            assert removed.workload == "web"

    @since("1.0")
    async def test_oom_kill_is_reported(self, kit: Kit) -> None:
        kit.needs("oom_kill")
        plan = kit.plan()
        async with kit.adapter.watch_bundles() as events:
            await _next_matching(events, kit, None, BundleEventKind.WATCHING)
            await kit.applied_and_running(plan)
            await kit.harness_call(kit.harness.oom_kill(kit.adapter, kit.ref(plan)))
            event = await _next_matching(
                events, kit, plan.bundle_id, BundleEventKind.OOM_KILLED, BundleEventKind.EXITED
            )
        assert event.kind is BundleEventKind.OOM_KILLED
        observed = await kit.observe(plan)
        assert observed.workloads[0].oom_killed

    @since("1.0")
    async def test_gap_is_reported_as_missed(self, kit: Kit) -> None:
        kit.needs("cause_event_gap")
        async with kit.adapter.watch_bundles() as events:
            await _next_matching(events, kit, None, BundleEventKind.WATCHING)
            await kit.harness_call(kit.harness.cause_event_gap(kit.adapter))
            missed = await _next_matching(events, kit, None, BundleEventKind.MISSED)
        assert missed.kind is BundleEventKind.MISSED
