"""A real node cut off: the adapter observes its instance lost, a new one runs on the other
node once the host applies again, and the node, back, stops the old one.

The node is cut off as a machine that drops off the network: its kubelet stopped (SIGSTOP) and
its link down (:mod:`localcluster.realnode.cutoff`). The two-node cluster's heartbeat is short
(``Heartbeat``: a 10 s lease, a 20 s grace period), so the controller manager calls the node
lost about 20 s after its last report; each wait below allows that with a wide margin for a busy
machine (a wait, not a timed assertion: the seconds are measured by the two-node benchmark).
What runs is checked on each node's own containerd, which sees what the API server cannot.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.to_thread
from _real import MARKS, new_id, serve, wait_for
from _two_nodes import apply_placed, node_names, pods_of
from pando_runtime_kubernetes import KubernetesAdapter

from pando_runtime import BundlePlan, BundleRef, Port

pytestmark = MARKS

LOST_WITHIN = 120.0
"""Seconds the wait for "lost" allows: the 20 s grace period, with room for a busy machine."""
STOPPED_WITHIN = 120.0
"""Seconds the node, back, has to stop the old container."""


async def _running_on(cluster: Any, index: int) -> set[str]:
    from localcluster.realnode.cutoff import running_containers  # noqa: PLC0415

    node = cluster.local.real_node_set.nodes[index]
    return await anyio.to_thread.run_sync(running_containers, node)


async def test_a_cut_off_node_is_observed_lost_and_the_app_moves_once_applied_again(
    two_nodes_adapter: KubernetesAdapter, two_nodes_admin_api: Any, two_real_nodes_cluster: Any
) -> None:
    from localcluster.realnode.cutoff import cut_off, reconnect  # noqa: PLC0415

    nodes = two_real_nodes_cluster.local.real_node_set
    first, second = node_names(two_real_nodes_cluster)
    app = new_id("lost")
    web = serve("web", 8080, ports=(Port(8080),))
    plan = BundlePlan(bundle_id=app, workloads=(web,))
    cut = False
    try:
        placed = await apply_placed(
            two_nodes_adapter, two_nodes_admin_api, (first, second), app, [(web, second)]
        )
        assert placed["web"]["node"] == second
        old = placed["web"]["container"]
        before = (await two_nodes_adapter.observe(BundleRef(app))).workload("web")
        assert old in await _running_on(two_real_nodes_cluster, 1)  # the control: it is seen

        await anyio.to_thread.run_sync(cut_off, nodes, 1)
        cut = True
        lost = await wait_for(
            two_nodes_adapter, app, lambda o: o.workload("web").lost, timeout=LOST_WITHIN
        )
        seen = lost.workload("web")
        assert (seen.present, seen.running, seen.exit_code) == (True, False, None)
        assert seen.instance_id == before.instance_id
        # The honest part: the cut-off node still runs the old container.
        assert old in await _running_on(two_real_nodes_cluster, 1)

        await two_nodes_adapter.apply(plan)  # the host applies again
        moved = await wait_for(two_nodes_adapter, app, lambda o: o.all_running, timeout=90)
        assert moved.workload("web").instance_id != before.instance_id
        now = await pods_of(two_nodes_admin_api, app)
        assert now["web"]["node"] == first
        assert now["web"]["container"] in await _running_on(two_real_nodes_cluster, 0)
        # Two instances run at once while the node is cut off: nothing can reach it to stop
        # the old one (docs/reliability.md says so, and what a host can do about it).
        assert old in await _running_on(two_real_nodes_cluster, 1)

        await anyio.to_thread.run_sync(reconnect, nodes, 1)
        cut = False
        with anyio.fail_after(STOPPED_WITHIN):
            while old in await _running_on(two_real_nodes_cluster, 1):  # noqa: ASYNC110
                await anyio.sleep(1)  # the kubelet, back, stops it: no event says so here
        after = await wait_for(
            two_nodes_adapter, app, lambda o: o.all_running and not o.workload("web").lost
        )
        assert after.workload("web").instance_id == moved.workload("web").instance_id
        assert (await pods_of(two_nodes_admin_api, app))["web"]["node"] == first
    finally:
        if cut:
            await anyio.to_thread.run_sync(reconnect, nodes, 1)
        await two_nodes_adapter.destroy(BundleRef(app))
        # The next test finds both nodes Ready (and the unreachable taint gone).
        with anyio.fail_after(STOPPED_WITHIN):
            while not await anyio.to_thread.run_sync(  # noqa: ASYNC110 - polled
                two_real_nodes_cluster.local.node_ready, second
            ):
                await anyio.sleep(1)
