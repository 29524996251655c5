"""Helpers of the two-real-node tests: where an app's pods run, and placing each workload on
the node a test wants (the others cordoned while it is applied, as an operator drains one)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio.to_thread
from _real import wait_for
from pando_runtime_kubernetes._names import LABEL_WORKLOAD, namespace_for

from pando_runtime import BundlePlan, RuntimeAdapter, WorkloadPlan


def node_names(cluster: Any) -> list[str]:
    """The real nodes' names, first to last."""
    return [node.name for node in cluster.local.real_node_set.nodes]


async def set_schedulable(admin_api: Any, node: str, *, schedulable: bool) -> None:
    """Cordon node ``node`` (or uncordon it)."""
    from kubernetes import client  # noqa: PLC0415

    core = client.CoreV1Api(admin_api)
    body = {"spec": {"unschedulable": not schedulable}}
    await anyio.to_thread.run_sync(lambda: core.patch_node(node, body))


async def pods_of(admin_api: Any, bundle_id: str) -> dict[str, dict[str, str]]:
    """Each running pod of the app by workload (not one being deleted): its ``node``, ``ip``
    and ``container`` (the workload's container id in its node's runtime)."""
    from kubernetes import client  # noqa: PLC0415

    core = client.CoreV1Api(admin_api)
    pods = await anyio.to_thread.run_sync(
        lambda: core.list_namespaced_pod(namespace_for(bundle_id)).items
    )
    found: dict[str, dict[str, str]] = {}
    for pod in pods:
        workload = (pod.metadata.labels or {}).get(LABEL_WORKLOAD)
        if workload and pod.status.phase == "Running" and not pod.metadata.deletion_timestamp:
            ids = [
                c.container_id.split("://", 1)[-1]
                for c in pod.status.container_statuses or ()
                if c.name == workload and c.container_id
            ]
            found[workload] = {
                "node": str(pod.spec.node_name),
                "ip": str(pod.status.pod_ip),
                "container": ids[0] if ids else "",
            }
    return found


async def apply_placed(
    adapter: RuntimeAdapter,
    admin_api: Any,
    nodes: Sequence[str],
    bundle_id: str,
    placed: Sequence[tuple[WorkloadPlan, str]],
) -> dict[str, dict[str, str]]:
    """Apply the app one workload more at a time, each while only its node takes pods; wait
    until all run and return :func:`pods_of` (every node schedulable again after)."""
    workloads: list[WorkloadPlan] = []
    try:
        for workload, node in placed:
            for each in nodes:
                await set_schedulable(admin_api, each, schedulable=each == node)
            workloads.append(workload)
            await adapter.apply(BundlePlan(bundle_id=bundle_id, workloads=tuple(workloads)))
            await wait_for(adapter, bundle_id, lambda o: o.all_running, timeout=90)
    finally:
        for each in nodes:
            await set_schedulable(admin_api, each, schedulable=True)
    return await pods_of(admin_api, bundle_id)
