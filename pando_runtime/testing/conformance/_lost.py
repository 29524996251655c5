"""Conformance: an instance whose place (node) stops reporting is observed ``lost``."""

from __future__ import annotations

from ..._contract._observed import ObservedBundle, ObservedWorkload
from ..._contract._plans import BundlePlan
from ._base import ConformanceBase, Kit, since

__all__ = ["LostNodeConformance"]


def _lost(observed: ObservedBundle) -> bool:
    return observed.workloads[0].lost


async def _applied_then_lost(kit: Kit, plan: BundlePlan) -> ObservedWorkload:
    """Apply ``plan``, cut its workload's node off and wait until it is observed lost.

    Returns the workload as it ran before.
    """
    first = (await kit.applied_and_running(plan)).workloads[0]
    await kit.harness_call(kit.harness.lose_node(kit.adapter, kit.ref(plan)))
    await kit.until_observed(plan, _lost, "the workload to be lost")
    return first


class LostNodeConformance(ConformanceBase):
    """What a host sees when a node is cut off, and what applying again does."""

    @since("1.3")
    async def test_an_instance_on_a_lost_node_is_observed_lost_then_replaced(
        self, kit: Kit
    ) -> None:
        kit.needs("lose_node", "recover_node", "running_instances")
        plan = kit.plan()
        ref = kit.ref(plan)
        try:
            first = await _applied_then_lost(kit, plan)
            lost = (await kit.observe(plan)).workloads[0]
            assert lost.present
            assert not lost.running  # nothing confirms it runs
            assert lost.instance_id == first.instance_id
            assert lost.exit_code is None
            await kit.quiet()
            assert (await kit.observe(plan)).workloads[0].lost  # never remediated by itself
            await kit.apply(plan)
            again = (await kit.running(plan)).workloads[0]
            assert again.instance_id != first.instance_id
            assert not again.lost
        finally:
            await kit.harness.recover_node(kit.adapter)

        async def one_instance() -> bool:
            return await kit.harness.running_instances(kit.adapter, ref) == 1

        # Back, the node stops the old instance: one runs, the new one.
        await kit.eventually(one_instance, "the old instance to be stopped")
        after = (await kit.observe(plan)).workloads[0]
        assert after.running
        assert after.instance_id == again.instance_id

    @since("1.3")
    async def test_a_lost_node_that_comes_back_is_running_the_same_instance(self, kit: Kit) -> None:
        kit.needs("lose_node", "recover_node", "running_instances")
        plan = kit.plan()
        try:
            first = await _applied_then_lost(kit, plan)
        finally:
            await kit.harness.recover_node(kit.adapter)
        back = (await kit.running(plan)).workloads[0]
        assert back.instance_id == first.instance_id
        assert back.restart_count == first.restart_count
        assert not back.lost
        assert await kit.harness.running_instances(kit.adapter, kit.ref(plan)) == 1
