"""Benchmark: two real nodes. Pods started per second on two nodes against one, and a node cut
off: how soon ``observe`` says so, and how soon the app runs on the other node once applied
again.

    python adapters/kubernetes/benchmarks/kube_two_nodes.py [--apps 20] [--rounds 3]

It starts a local control plane with two real nodes (``LocalCluster(real_nodes=2)``: each its
own kubelet, containerd, kube-proxy and kube-router in its own network namespace, linked by the
harness; the short heartbeat of ``localcluster.realnode.configs.Heartbeat``: a 10 s lease, a 20 s
grace period) and drives the adapter with the admin kubeconfig (as ``kube_real_node.py``).
Prints:

- pods started per second: ``--apps`` one-workload apps applied at once with both nodes
  taking pods, then the same with one node cordoned; from the first ``apply`` to ``observe``
  saying every app runs (the pods on each node are counted, to show both took some);
- a node cut off (its kubelet stopped with SIGSTOP and its link down, as
  ``localcluster.realnode.cutoff`` does), ``--rounds`` times, an app placed on it each time:
  the seconds from the cut to the controller manager marking the node not Ready (the node's
  condition's ``lastTransitionTime``, to the second), and to ``observe`` saying the workload
  ``lost``; from the host's ``apply`` to ``observe`` saying it runs on the other node; and from
  the node's return to its containerd no longer running the old container.

Needs root and what ``localcluster.realnode.setup.missing()`` checks; where the machine lacks
any of it, prints one line saying so and exits 0. Prints figures; asserts only that the run did
what it says.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
import uuid
from http import HTTPStatus
from typing import Any

import anyio
import anyio.to_thread
from kube_real_node import SCRIPT, skip_reason
from kube_real_node import adapter_settings as real_node_settings
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import MANAGED_SELECTOR, namespace_for

from pando_runtime import BundlePlan, BundleRef, WorkloadPlan

POLL = 0.1
"""Seconds between two observes (observe reads the adapter's cache)."""
RUNNING_WAIT = 180.0
LOST_WAIT = 120.0


def out(text: str = "") -> None:
    print(text, flush=True)


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def plan(bundle_id: str, image: str) -> BundlePlan:
    main = WorkloadPlan(name="main", image=image, entrypoint=("sh", "-c", SCRIPT))
    return BundlePlan(bundle_id=bundle_id, workloads=(main,))


def adapter_settings(cluster: Any) -> dict[str, Any]:
    """``kube_real_node.py``'s settings, with the cluster's pod range (every node's)."""
    from localcluster.realnode import network  # noqa: PLC0415

    return {**real_node_settings(cluster), "pod_cidr": network.POD_RANGE}


def set_schedulable(cluster: Any, node: str, *, schedulable: bool) -> None:
    status, body = cluster.rest.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        {"spec": {"unschedulable": not schedulable}},
        content_type="application/strategic-merge-patch+json",
    )
    assert status == HTTPStatus.OK, f"patch node {node}: {status} {body}"


def pods_by_node(cluster: Any) -> dict[str, int]:
    status, body = cluster.rest.get(f"/api/v1/pods?labelSelector={MANAGED_SELECTOR}")
    assert status == HTTPStatus.OK, status
    counts: dict[str, int] = {}
    for pod in body["items"]:
        node = pod.get("spec", {}).get("nodeName") or "-"
        counts[node] = counts.get(node, 0) + 1
    return counts


def app_pods_left(cluster: Any) -> int:
    return sum(pods_by_node(cluster).values())


def pod_of(cluster: Any, bundle_id: str) -> dict[str, Any]:
    """The app's pod not being deleted: its node and its container's id."""
    status, body = cluster.rest.get(f"/api/v1/namespaces/{namespace_for(bundle_id)}/pods")
    assert status == HTTPStatus.OK, status
    for pod in body["items"]:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        statuses = pod.get("status", {}).get("containerStatuses") or [{}]
        container = (statuses[0].get("containerID") or "").split("://", 1)[-1]
        return {"node": pod["spec"].get("nodeName"), "container": container}
    raise AssertionError(f"no pod of {bundle_id}")


def not_ready_since(cluster: Any, node: str) -> dt.datetime | None:
    """When the node's Ready condition last left True (``None`` while it is True)."""
    status, body = cluster.rest.get(f"/api/v1/nodes/{node}")
    assert status == HTTPStatus.OK, status
    for condition in body.get("status", {}).get("conditions") or ():
        if condition.get("type") == "Ready" and condition.get("status") != "True":
            return dt.datetime.fromisoformat(condition["lastTransitionTime"])
    return None


async def until(check: Any, timeout: float, what: str) -> float:  # noqa: ASYNC109
    """Poll ``check`` (async) until true; returns the monotonic time it first was."""
    with anyio.fail_after(timeout):
        while not await check():  # noqa: ASYNC110 - polls the adapter and the cluster
            await anyio.sleep(POLL)
    progress(what)
    return time.monotonic()


async def start_rate(
    adapter: KubernetesAdapter, cluster: Any, image: str, apps: int, label: str
) -> tuple[float, dict[str, int]]:
    """Pods started per second for ``apps`` apps applied at once, and where they ran."""
    ids = [f"two-{uuid.uuid4().hex[:8]}" for _ in range(apps)]
    t0 = time.monotonic()
    async with anyio.create_task_group() as group:
        for bundle_id in ids:
            group.start_soon(adapter.apply, plan(bundle_id, image))

    async def all_running() -> bool:
        for bundle_id in ids:
            if not (await adapter.observe(BundleRef(bundle_id))).all_running:
                return False
        return True

    done = await until(all_running, RUNNING_WAIT, f"{label}: {apps} apps running")
    where = await anyio.to_thread.run_sync(pods_by_node, cluster)
    async with anyio.create_task_group() as group:
        for bundle_id in ids:
            group.start_soon(adapter.destroy, BundleRef(bundle_id))

    async def gone() -> bool:
        return await anyio.to_thread.run_sync(app_pods_left, cluster) == 0

    await until(gone, RUNNING_WAIT, f"{label}: pods gone")
    return apps / (done - t0), where


async def lost_round(
    adapter: KubernetesAdapter, cluster: Any, image: str, round_no: int
) -> dict[str, float]:
    """Cut the second node off with an app on it; the seconds of each step."""
    from localcluster.realnode.cutoff import cut_off, reconnect, running_containers  # noqa: PLC0415

    nodes = cluster.real_node_set
    first, second = (n.name for n in nodes.nodes)
    bundle_id = f"lost-{round_no}-{uuid.uuid4().hex[:6]}"
    the_plan = plan(bundle_id, image)
    set_schedulable(cluster, first, schedulable=False)
    try:
        await adapter.apply(the_plan)

        async def running() -> bool:
            return (await adapter.observe(BundleRef(bundle_id))).all_running

        await until(running, RUNNING_WAIT, f"round {round_no}: running on {second}")
    finally:
        set_schedulable(cluster, first, schedulable=True)
    old = (await anyio.to_thread.run_sync(pod_of, cluster, bundle_id))["container"]
    figures: dict[str, float] = {}
    cut_wall = dt.datetime.now(dt.UTC)
    t_cut = time.monotonic()
    await anyio.to_thread.run_sync(cut_off, nodes, 1)
    back = False
    try:

        async def lost() -> bool:
            return (await adapter.observe(BundleRef(bundle_id))).workload("main").lost

        figures["observed lost"] = await until(lost, LOST_WAIT, "lost") - t_cut
        since = await anyio.to_thread.run_sync(not_ready_since, cluster, second)
        if since is not None:
            figures["node not Ready"] = (since - cut_wall).total_seconds()
        t_apply = time.monotonic()
        await adapter.apply(the_plan)
        figures["apply to running elsewhere"] = (
            await until(running, RUNNING_WAIT, "running again") - t_apply
        )
        moved = await anyio.to_thread.run_sync(pod_of, cluster, bundle_id)
        assert moved["node"] == first, moved
        still = old in await anyio.to_thread.run_sync(running_containers, nodes.nodes[1])
        figures["old still running while cut off"] = float(still)
        t_back = time.monotonic()
        await anyio.to_thread.run_sync(reconnect, nodes, 1)
        back = True

        async def old_stopped() -> bool:
            left = await anyio.to_thread.run_sync(running_containers, nodes.nodes[1])
            return old not in left

        figures["back to old stopped"] = await until(old_stopped, LOST_WAIT, "old stopped") - t_back

        async def ready() -> bool:
            return await anyio.to_thread.run_sync(cluster.node_ready, second)

        await until(ready, LOST_WAIT, f"{second} Ready again")
    finally:
        if not back:
            await anyio.to_thread.run_sync(reconnect, nodes, 1)
        await adapter.destroy(BundleRef(bundle_id))
    return figures


async def measure(cluster: Any, args: argparse.Namespace) -> None:
    from localcluster import images  # noqa: PLC0415

    image = images.WORKLOAD
    second = cluster.real_node_set.nodes[1].name
    async with KubernetesAdapter(adapter_settings(cluster)) as adapter:
        await adapter.health_check()
        rate_two, where_two = await start_rate(adapter, cluster, image, args.apps, "two nodes")
        set_schedulable(cluster, second, schedulable=False)
        try:
            rate_one, where_one = await start_rate(adapter, cluster, image, args.apps, "one node")
        finally:
            set_schedulable(cluster, second, schedulable=True)
        rounds = [await lost_round(adapter, cluster, image, i) for i in range(args.rounds)]
    out(f"\n== two real nodes, {dt.datetime.now(dt.UTC):%Y-%m-%d}, load {os.getloadavg()[0]:.1f}")
    out(f"pods started per second, {args.apps} apps at once:")
    out(f"  two nodes  {rate_two:6.2f}/s   pods per node {where_two}")
    out(f"  one node   {rate_one:6.2f}/s   pods per node {where_one}")
    out(f"a node cut off, {args.rounds} rounds (seconds: median, min, max):")
    for key in (
        "node not Ready",
        "observed lost",
        "apply to running elsewhere",
        "back to old stopped",
    ):
        values = [r[key] for r in rounds if key in r]
        if values:
            out(
                f"  {key:28} {statistics.median(values):6.1f} {min(values):6.1f} {max(values):6.1f}"
            )
    still = sum(int(r["old still running while cut off"]) for r in rounds)
    out(f"  old container still running on the cut-off node after the move: {still}/{len(rounds)}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--apps", type=int, default=20, help="apps of each start-rate phase")
    parser.add_argument("--rounds", type=int, default=3, help="times a node is cut off")
    args = parser.parse_args()
    reason = skip_reason()  # puts the harness on the path
    if reason is not None:
        out(f"kube_two_nodes: skipped, this machine cannot run a real node: it lacks {reason}")
        return
    from localcluster import LocalCluster  # noqa: PLC0415

    t0 = time.monotonic()
    cluster = LocalCluster(name="bench-two", real_nodes=2)
    cluster.start()
    try:
        out(f"(cluster with two real nodes up in {time.monotonic() - t0:.1f} s)")
        anyio.run(measure, cluster, args)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
