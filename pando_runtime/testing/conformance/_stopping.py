"""Conformance: an instance told to end is never reported gone while it still runs.

A host that trusts "gone" applies the app again or frees what it held; an instance still
ending gracefully (an app that traps SIGTERM) must therefore be reported ``stopping``, and
an apply right after a destroy must never start a new instance beside the old one.
"""

from __future__ import annotations

import anyio
import pytest

from ..._contract._errors import StillStopping
from ..._contract._observed import ObservedBundle
from ..._contract._plans import BundlePlan
from ..._contract._refs import BundleRef
from ._base import ConformanceBase, Kit, since

__all__ = ["StoppingConformance"]

NAME = "slow"


async def _slow_app(kit: Kit) -> tuple[BundlePlan, str]:
    """A running app of one slow-stopping workload, and its instance id."""
    kit.needs("slow_stop_workload", "instance_runs")
    plan = kit.plan(await kit.harness.slow_stop_workload(kit.adapter, NAME))
    observed = await kit.applied_and_running(plan)
    instance_id = observed.workload(NAME).instance_id
    assert instance_id
    return plan, instance_id


async def _watch_until(
    kit: Kit, plan: BundlePlan, instance_id: str, *, done: str
) -> ObservedBundle:
    """Observe, then ask the runtime, until ``done`` (``gone`` or ``stopped``) is observed.

    Each observation comes first: once it says the instance is gone or stopped, the runtime
    asked after it must find the instance ended; while the old instance is reported
    running, it must be reported stopping. Returns the last observation.
    """
    observed: ObservedBundle | None = None
    with anyio.move_on_after(kit.harness.timeout):
        while True:
            observed = await kit.observe(plan)
            runs = await kit.harness.instance_runs(kit.adapter, kit.ref(plan), instance_id)
            old = next(
                (w for w in observed.workloads if w.instance_id == instance_id and w.running),
                None,
            )
            if not observed.exists if done == "gone" else old is None:
                assert not runs, f"observe said {done} while the instance still ran: {observed}"
                return observed
            if old is not None:
                assert old.stopping, f"told to end, but not reported stopping: {observed}"
            await anyio.sleep(kit.harness.poll_interval)
    pytest.fail(f"the instance was never {done}; last seen: {observed!r}")


class StoppingConformance(ConformanceBase):
    """What ``stop`` and ``destroy`` promise while an instance ends gracefully."""

    @since("1.3")
    async def test_destroy_reports_stopping_until_the_instance_has_ended(self, kit: Kit) -> None:
        plan, instance_id = await _slow_app(kit)
        await kit.adapter.destroy(BundleRef(plan.bundle_id))
        last = await _watch_until(kit, plan, instance_id, done="gone")
        assert not last.workloads

    @since("1.3")
    async def test_stop_reports_running_until_the_instance_has_ended(self, kit: Kit) -> None:
        plan, instance_id = await _slow_app(kit)
        await kit.adapter.stop(BundleRef(plan.bundle_id))
        last = await _watch_until(kit, plan, instance_id, done="stopped")
        assert last.exists, "stop keeps the bundle"

    @since("1.3")
    async def test_apply_right_after_destroy_never_runs_beside_the_old_instance(
        self, kit: Kit
    ) -> None:
        plan, instance_id = await _slow_app(kit)
        ref = kit.ref(plan)
        await kit.adapter.destroy(BundleRef(plan.bundle_id))

        refusals: list[StillStopping] = []

        async def applied() -> bool:
            try:
                await kit.apply(plan)
            except StillStopping as refused:  # the adapter's bound ran out: apply again
                refusals.append(refused)
                # A look at the runtime meanwhile (the fake's harness moves its clock at each).
                await kit.harness.instance_runs(kit.adapter, ref, instance_id)
                return False
            return True

        await kit.eventually(applied, "an apply the old instance no longer holds back")
        assert all(r.details["workloads"] == [NAME] for r in refusals), refusals
        # Whatever apply waited for or refused, once it has started the new instance the old
        # one has ended.
        assert not await kit.harness.instance_runs(kit.adapter, ref, instance_id)
        again = await kit.running(plan)
        assert again.workload(NAME).instance_id != instance_id
        assert not again.stopping
