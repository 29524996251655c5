"""Conformance: an instance told to end is never reported gone while it still runs.

A host that trusts "gone" applies the app again or frees what it held; an instance still
ending gracefully (an app that traps SIGTERM) must therefore be reported ``stopping``, and
an apply right after a destroy must never start a new instance beside the old one. That
holds from the moment ``destroy`` is called, not only once it returns: a host observing
meanwhile (another replica, a watch loop) trusts the answer just the same.
"""

from __future__ import annotations

import anyio
import attrs
import pytest
from anyio.abc import TaskStatus

from ..._contract._capabilities import Capability
from ..._contract._errors import StillStopping
from ..._contract._observed import ObservedBundle, ObservedWorkload
from ..._contract._plans import BundlePlan
from ..._contract._refs import BundleRef
from ._base import ConformanceBase, Kit, since

__all__ = ["StoppingConformance"]

NAME = "slow"


async def _slow_app(kit: Kit) -> tuple[BundlePlan, str]:
    """A running app of one slow-stopping workload, and its instance id.

    A slow-stopping workload with a health check is ready to end slowly once that passes (a
    process that traps SIGTERM only some time after it started): it is waited for.
    """
    kit.needs("slow_stop_workload", "instance_runs")
    plan = kit.plan(await kit.harness.slow_stop_workload(kit.adapter, NAME))
    observed = await kit.applied_and_running(plan)
    if plan.workloads[0].health is not None:
        observed = await kit.until_observed(
            plan, lambda o: o.workload(NAME).healthy is True, "the slow workload to be ready"
        )
    instance_id = observed.workload(NAME).instance_id
    assert instance_id
    return plan, instance_id


async def _watch_until_stopped(kit: Kit, plan: BundlePlan, instance_id: str) -> ObservedBundle:
    """Observe, then ask the runtime, until the instance is observed stopped.

    Each observation comes first: once it says the instance is stopped, the runtime asked
    after it must find the instance ended; while the old instance is reported running, it
    must be reported stopping. Returns the last observation.
    """
    observed: ObservedBundle | None = None
    with anyio.move_on_after(kit.harness.timeout):
        while True:
            observed = await kit.observe(plan)
            runs = await kit.harness.instance_runs(kit.adapter, kit.ref(plan), instance_id)
            old = _old_running(observed, instance_id)
            if old is None:
                assert not runs, f"observe said stopped while the instance still ran: {observed}"
                return observed
            assert old.stopping, f"told to end, but not reported stopping: {observed}"
            await anyio.sleep(kit.harness.poll_interval)
    pytest.fail(f"the instance was never stopped; last seen: {observed!r}")


def _old_running(observed: ObservedBundle, instance_id: str) -> ObservedWorkload | None:
    """The instance as ``observed`` while it says the instance runs, else ``None``."""
    return next((w for w in observed.workloads if w.instance_id == instance_id and w.running), None)


@attrs.define
class _Looks:
    """What observing alongside a ``destroy`` saw."""

    destroyed: anyio.Event = attrs.field(factory=anyio.Event)
    taken: int = 0
    alongside: int = 0
    """Looks taken while ``destroy`` ran or the instance did (a runtime that kills at once
    shows only the first)."""
    lies: list[str] = attrs.field(factory=list)
    """Observations that said the instance ended while it still ran, or, once ``destroy``
    returned, that it ran without saying it was stopping."""
    gone: ObservedBundle | None = None


async def _destroy(
    kit: Kit, plan: BundlePlan, looks: _Looks, *, task_status: TaskStatus[None]
) -> None:
    task_status.started()  # the destroy starts before the observer's first look
    await kit.adapter.destroy(BundleRef(plan.bundle_id))
    looks.destroyed.set()


async def _observe_alongside_destroy(kit: Kit, plan: BundlePlan, instance_id: str) -> _Looks:
    """Observe, then ask the runtime, while ``destroy`` runs and after, until gone.

    The observation comes first: once it says the instance ended (the bundle gone, or the
    instance not running), the runtime asked after it must find it ended too. While
    ``destroy`` runs the instance may still be reported running (it may not have been told to
    end yet); once ``destroy`` returned, it must be reported stopping while it runs.
    """
    looks = _Looks()
    ref = kit.ref(plan)
    async with anyio.create_task_group() as tasks:
        await tasks.start(_destroy, kit, plan, looks)
        with anyio.move_on_after(kit.harness.timeout):
            while True:
                in_flight = not looks.destroyed.is_set()
                observed = await kit.observe(plan)
                runs = await kit.harness.instance_runs(kit.adapter, ref, instance_id)
                looks.taken += 1
                looks.alongside += in_flight or runs
                old = _old_running(observed, instance_id)
                when = "while destroy ran" if in_flight else "after destroy returned"
                if old is None and runs:
                    looks.lies.append(f"ended {when}, the instance still running: {observed}")
                if old is not None and not old.stopping and not in_flight:
                    looks.lies.append(f"running {when}, not reported stopping: {observed}")
                if not observed.exists and not in_flight:
                    looks.gone = observed
                    return looks
                await anyio.sleep(kit.harness.poll_interval)
        tasks.cancel_scope.cancel()  # never gone: a destroy still in flight need not hang the test
    return looks


class StoppingConformance(ConformanceBase):
    """What ``stop`` and ``destroy`` promise while an instance ends gracefully.

    Gate ``stopping_observed``: a fleet holding a member written before API 1.3 declares it
    false (its answers cannot promise that "gone" means ended), and is not held to it here.
    """

    gate = (Capability.STOPPING_OBSERVED,)

    @since("1.3")
    async def test_destroy_reports_stopping_until_the_instance_has_ended(self, kit: Kit) -> None:
        plan, instance_id = await _slow_app(kit)
        looks = await _observe_alongside_destroy(kit, plan, instance_id)
        assert not looks.lies, (
            f"{len(looks.lies)} of {looks.taken} observations said what was not so; "
            f"the first: {looks.lies[0]}"
        )
        assert looks.gone is not None, "the bundle was never observed gone"
        assert not looks.gone.workloads
        assert looks.alongside, "destroy and the instance had ended before any look"

    @since("1.3")
    async def test_stop_reports_running_until_the_instance_has_ended(self, kit: Kit) -> None:
        plan, instance_id = await _slow_app(kit)
        await kit.adapter.stop(BundleRef(plan.bundle_id))
        last = await _watch_until_stopped(kit, plan, instance_id)
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
