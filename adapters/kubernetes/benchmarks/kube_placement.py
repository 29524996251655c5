"""Benchmark: where apps applied all at once go, over two clusters of equal room.

    python adapters/kubernetes/benchmarks/kube_placement.py [--apps 100] [--replicas 2]

It starts two local control planes at once (tests/support/localcluster), each with the same
kwok nodes, and applies ``--apps`` first-deploy apps through the multi-cluster adapter
(``kubernetes-multi``) all at the same instant: one task per app, no limit. Then the same
again with ``--replicas`` adapters (as several host replicas would), each applying its share
at once. Prints how many apps each cluster got, the largest share, and the seconds the
applies took. Placement by room without counting placements in flight sends every app of a
burst to the cluster that looked roomiest when they all read it; counting them splits the
burst evenly. Prints figures; asserts only that every app was placed.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from pando_runtime_kubernetes import MultiClusterAdapter

from pando_runtime import BundlePlan, BundleRef, Resources, WorkloadPlan

ROOT = Path(__file__).resolve().parents[3]
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


def local_clusters(stack: contextlib.ExitStack, apps: int) -> str:
    """Two local control planes with the same nodes; the kubeconfig holding both."""
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localcluster import DEFAULT_NODES, LocalCluster, NodeSpec  # noqa: PLC0415
    from localcluster.kubeconfig import merge_kubeconfigs  # noqa: PLC0415

    pods = 2 * apps + 110  # every app's pod fits wherever placement puts it
    nodes = [NodeSpec(n.name, n.cpu, "64Gi", pods=pods) for n in DEFAULT_NODES]
    clusters = [stack.enter_context(LocalCluster(name=f"place-{i}", nodes=nodes)) for i in range(2)]
    work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kube-place-")))
    return str(merge_kubeconfigs(work / "kubeconfig", [c.kubeconfig for c in clusters]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--apps", type=int, default=100)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--kubeconfig", help="a kubeconfig holding two clusters' contexts")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        kubeconfig = args.kubeconfig or local_clusters(stack, args.apps)
        anyio.run(burst, kubeconfig, "one", args.apps, 1)
        anyio.run(burst, kubeconfig, "many", args.apps, args.replicas)


if __name__ == "__main__":
    main()
