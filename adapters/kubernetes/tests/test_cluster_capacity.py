"""Capacity on the local control plane: the apps' pods from the cache, every other pod listed.

``capacity`` and ``largest_fit_for`` must say what the scheduler would: each eligible node's
allocatable minus what every live pod on it requests (the apps', the adapter's helpers' and
everyone else's). The figures are checked against the same arithmetic over a full list of the
cluster's pods made by an administrator.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import anyio.to_thread
import pytest
from _admin_calls import core_call
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import (
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    ROLE_VOLUME_HELPER,
    namespace_for,
)
from pando_runtime_kubernetes.cache._capacity import NodeRoom, node_rooms, pod_reservation
from pando_runtime_kubernetes.features._capacity import ClusterCapacity, largest_fit

from pando_runtime import BundlePlan, BundleRef, Resources, WorkloadPlan
from pando_runtime.plugin import read_scope

pytestmark = [pytest.mark.kube, pytest.mark.anyio, pytest.mark.every_minor]
IMAGE = "registry.example/capacity/app:1"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _pod(name: str, cpu: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": IMAGE,
                    "resources": {"requests": {"cpu": cpu, "memory": "48Mi"}},
                }
            ],
        },
    }


@pytest.fixture
def others(admin_api: Any) -> Iterator[dict[str, str]]:
    """A pod nobody manages, and a pod labelled as one of the adapter's helpers."""
    from kubernetes import client  # noqa: PLC0415

    core = client.CoreV1Api(admin_api)
    tag = uuid.uuid4().hex[:6]
    foreign, helpers = f"capacity-foreign-{tag}", f"pando-capacity-helpers-{tag}"
    managed = {LABEL_MANAGED_BY: MANAGED_BY}
    core.create_namespace({"metadata": {"name": foreign}})
    core.create_namespace({"metadata": {"name": helpers, "labels": managed}})
    core.create_namespaced_pod(foreign, _pod("other", "230m", {}))
    core.create_namespaced_pod(
        helpers, _pod("helper", "170m", {**managed, LABEL_ROLE: ROLE_VOLUME_HELPER})
    )
    try:
        yield {"foreign": foreign, "helpers": helpers}
    finally:
        for ns in (foreign, helpers):
            core.delete_namespace(ns)


async def _every_room(admin_api: Any, adapter: KubernetesAdapter) -> list[NodeRoom]:
    """Each eligible node's room by the same arithmetic over every live pod, listed whole."""

    async def items(fn: str) -> list[dict[str, Any]]:
        response = await core_call(admin_api, fn, _preload_content=False)
        return list(json.loads(response.data)["items"])

    nodes = await items("list_node")
    pods = await items("list_pod_for_all_namespaces")
    reservations = [r for r in map(pod_reservation, pods) if r]
    return node_rooms(nodes, reservations, adapter.config.node_selector)


async def _placed(admin_api: Any, *namespaces: str) -> None:
    """Wait until every pod of ``namespaces`` is on a node."""
    with anyio.fail_after(60):
        while True:
            placed = []
            for ns in namespaces:
                pods = (await core_call(admin_api, "list_namespaced_pod", ns)).items
                placed.append(bool(pods) and all(p.spec.node_name for p in pods))
            if all(placed):
                return
            await anyio.sleep(0.2)


@pytest.fixture
async def adapter(adapter_config: dict[str, Any]) -> AsyncIterator[KubernetesAdapter]:
    async with KubernetesAdapter(adapter_config) as adapter:
        yield adapter


async def test_capacity_counts_every_pod_and_lists_only_those_the_cache_lacks(
    adapter: KubernetesAdapter,
    admin_api: Any,
    adapter_config: dict[str, Any],
    others: dict[str, str],
) -> None:
    bundle_id = f"cap-{uuid.uuid4().hex[:8]}"
    plan = BundlePlan(
        bundle_id=bundle_id,
        workloads=(
            WorkloadPlan(
                name="web",
                image=IMAGE,
                resources=Resources(cpu_millis=310, memory_bytes=96 * 1024**2),
            ),
        ),
    )
    await adapter.apply(plan)
    try:
        await _placed(admin_api, namespace_for(bundle_id), *others.values())
        expected = await _every_room(admin_api, adapter)
        rooms = ClusterCapacity(adapter.session, adapter.config)
        # The cache follows the scheduler's binding a moment later: wait (bounded) for it.
        with anyio.fail_after(30):
            while True:
                if await rooms.rooms() == expected:
                    break
                await anyio.sleep(0.2)
        helpers = [r for r in expected if others["helpers"] in r.by_namespace]
        assert helpers, "the helper pod is counted as the adapter's"
        assert any(r.other_cpu >= 230 for r in expected), "the foreign pod is counted"
        calls = adapter.api_calls
        async with read_scope():
            capacity = await adapter.capacity()
            own = await adapter.largest_fit_for(bundle_id)
        # Nodes, pods nobody manages, the adapter's helpers: the apps' own pods are not listed.
        assert adapter.api_calls - calls == 3
        assert capacity.total_cpu_millis == sum(r.cpu_millis - r.other_cpu for r in expected)
        assert capacity.largest_fit == largest_fit(expected, None)
        assert own == largest_fit(expected, namespace_for(bundle_id))
    finally:
        await adapter.destroy(BundleRef(bundle_id))
