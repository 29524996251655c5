"""Benchmark: where apps applied all at once go, over two clusters of equal room.

    python adapters/kubernetes/benchmarks/kube_placement.py [--apps 100] [--replicas 2]

It starts two local control planes at once (tests/support/localcluster), each with the same
kwok nodes (two of 4 CPU and 64Gi, as ``kube_apps.py --clusters 2``), and applies ``--apps``
first-deploy apps through the multi-cluster adapter (``kubernetes-multi``) all at the same
instant: one task per app, no limit. Then the same again with ``--replicas`` adapters (as
several host replicas would), each applying its share at once. Prints how many apps each
cluster got, the largest share, and the seconds the applies took. Placement by room without
counting placements in flight sends every app of a burst to the cluster that looked roomiest
when they all read it; counting them splits the burst evenly. Prints figures; asserts only
that every app was placed.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from typing import Any

import anyio
from kube_apps import local_clusters  # two control planes, each node with room for every pod
from pando_runtime_kubernetes import MultiClusterAdapter

from pando_runtime import BundlePlan, BundleRef, Resources, WorkloadPlan

SETTINGS: dict[str, Any] = {
    "trust_network_policy": True,
    "api_qps": 1000.0,
    "api_burst": 200,
}


def plan(run: str, i: int) -> BundlePlan:
    web = WorkloadPlan(
        name="web",
        image="registry.example/bench/app:1",
        resources=Resources(cpu_millis=10, memory_bytes=64 * 1024**2),
    )
    return BundlePlan(bundle_id=f"{run}-{i:04d}", workloads=(web,), first_deploy=True)


async def burst(kubeconfig: str, run: str, apps: int, replicas: int) -> None:
    """Apply ``apps`` apps at once through ``replicas`` adapters; print where they went."""
    plans = [plan(run, i) for i in range(apps)]
    async with contextlib.AsyncExitStack() as stack:
        adapters = [
            await stack.enter_async_context(
                MultiClusterAdapter({"kubeconfig": kubeconfig, "settings": SETTINGS})
            )
            for _ in range(replicas)
        ]
        start = time.perf_counter()
        async with anyio.create_task_group() as group:
            for i, p in enumerate(plans):
                group.start_soon(adapters[i % replicas].apply, p)
        seconds = time.perf_counter() - start
        where = dict.fromkeys(adapters[0].members, 0)
        for p in plans:
            where[str(await adapters[0].locate(p.bundle_id))] += 1
        assert sum(where.values()) == apps, where
        print(
            f"{run}: {apps} apps at once through {replicas} adapter(s) in {seconds:.1f} s; "
            "apps per cluster: "
            + ", ".join(f"{name} {n}" for name, n in where.items())
            + f"; largest share {max(where.values()) / apps:.0%}"
        )
        async with anyio.create_task_group() as group:
            for p in plans:
                group.start_soon(adapters[0].destroy, BundleRef(p.bundle_id))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--apps", type=int, default=100)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--kubeconfig", help="a kubeconfig holding two clusters' contexts")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        kubeconfig = args.kubeconfig or local_clusters(stack, 2, args.apps)
        anyio.run(burst, kubeconfig, "one", args.apps, 1)
        anyio.run(burst, kubeconfig, "many", args.apps, args.replicas)


if __name__ == "__main__":
    main()
