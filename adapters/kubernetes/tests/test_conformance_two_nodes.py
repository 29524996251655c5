"""The conformance kit's lost-node tests on two real nodes: one cut off for real.

The cluster is the ``two_real_nodes_cluster`` fixture's (its heartbeat calls a silent node lost
after 20 s). The hooks: ``lose_node`` cuts off the node that runs the workload's pod (its
kubelet stopped, its link down: :mod:`localcluster.realnode.cutoff`), ``recover_node`` brings it
back and waits until it is Ready, ``running_instances`` counts the workload's running containers
on both nodes' own containerd, by the labels the CRI puts on them (so an instance the API server
no longer lists is counted too).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.to_thread
import pytest
from _real_harness import RealNodeHarness
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import namespace_for

from pando_runtime import RuntimeAdapter, WorkloadRef
from pando_runtime.testing.conformance import ConformanceHarness, LostNodeConformance

pytestmark = [pytest.mark.kube, pytest.mark.real_node]


class TwoNodesHarness(RealNodeHarness):
    """The real-node hooks, and a node cut off and counted on (see the module docstring)."""

    timeout = 120.0  # the 20 s grace period, with room for a busy machine

    def __init__(self, admin_api: Any, cluster: Any) -> None:
        super().__init__(admin_api, cgroup_root=None)
        self.cluster = cluster
        self.nodes = cluster.local.real_node_set
        self.cut: int | None = None

    async def lose_node(self, adapter: RuntimeAdapter, ref: WorkloadRef) -> None:
        from localcluster.realnode.cutoff import cut_off  # noqa: PLC0415

        pod = await self._pod(adapter, ref)
        names = [node.name for node in self.nodes.nodes]
        self.cut = names.index(pod.spec.node_name)
        await anyio.to_thread.run_sync(cut_off, self.nodes, self.cut)

    async def recover_node(self, adapter: RuntimeAdapter) -> None:
        from localcluster.realnode.cutoff import reconnect  # noqa: PLC0415

        if self.cut is None:
            return
        index, self.cut = self.cut, None
        await anyio.to_thread.run_sync(reconnect, self.nodes, index)
        name = self.nodes.nodes[index].name
        with anyio.fail_after(self.timeout):
            while not await anyio.to_thread.run_sync(self.cluster.local.node_ready, name):  # noqa: ASYNC110
                await anyio.sleep(0.5)

    async def running_instances(self, adapter: RuntimeAdapter, ref: WorkloadRef) -> int:
        from localcluster.realnode.cutoff import running_containers  # noqa: PLC0415

        ns = namespace_for(ref.bundle_id)
        count = 0
        for node in self.nodes.nodes:
            found = await anyio.to_thread.run_sync(running_containers, node, ns, ref.workload)
            count += len(found)
        return count


class TestTwoNodesLostConformance(LostNodeConformance):
    @pytest.fixture
    def anyio_backend(self) -> str:
        """asyncio only: a node cut off costs half a minute, and trio runs the same adapter
        code through the kit on the fake and on kwok's nodes."""
        return "asyncio"

    @pytest.fixture
    async def adapter(
        self, two_nodes_adapter_config: dict[str, Any]
    ) -> AsyncIterator[KubernetesAdapter]:
        # NetworkPolicy trusted (kube-router enforces it): no canary per test.
        config = {**two_nodes_adapter_config, "trust_network_policy": True}
        async with KubernetesAdapter(config) as adapter:
            yield adapter

    @pytest.fixture
    def harness(self, two_real_nodes_cluster: Any, two_nodes_admin_api: Any) -> ConformanceHarness:
        return TwoNodesHarness(two_nodes_admin_api, two_real_nodes_cluster)
