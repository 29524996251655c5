"""Benchmark: API calls per operation and cache cost with many apps on a real API server.

    python adapters/kubernetes/benchmarks/kube_apps.py [--apps 200] [--kubeconfig PATH]
    python adapters/kubernetes/benchmarks/kube_apps.py --clusters 2 [--apps 1000]

Without ``--kubeconfig`` it starts the local control plane (tests/support/localcluster).
Prints API calls per first apply, per re-apply and per observe, the seconds of one observe pass
over all apps, and the memory one cached pod takes; where the cluster serves the metrics API,
API calls and seconds of ``usage`` over all apps and of one ``in_use``. Then the same for apps
whose egress is restricted (a CIDR rule and a host name, so each has an egress gateway), and
for apps whose workload is exposed (a policy of its own admits the host and the edge), first
apply and re-apply, with the writes among the calls (one cluster only).

With ``--clusters N`` it starts N local control planes at once and drives them through the
multi-cluster adapter (``kubernetes-multi``): every app is a first deploy, placed by room, so
the first apply's calls are given as the apply on the app's cluster plus the placement's reads
(each member's nodes and pods); then the same figures as for one cluster, and where the apps
went.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._multi import MultiClusterAdapter
from pando_runtime_kubernetes._names import MANAGED_SELECTOR
from pando_runtime_kubernetes.cache._stores import PodStore
from pando_runtime_kubernetes.session._session import ClusterSession

from pando_runtime import (
    BundlePlan,
    BundleRef,
    EgressPolicy,
    EgressRule,
    NetworkPlan,
    Port,
    Resources,
    RuntimeAdapter,
    WorkloadPlan,
)

ROOT = Path(__file__).resolve().parents[3]
SAMPLE_WAIT = 120
MIN_SAMPLE = 2**20
"""What a pod uses at least, where kwok simulates usage (1 MiB)."""
PODS_PER_NODE = 110
PLACEMENT_READS = ("GET nodes", "GET pods")
"""What placing a new app reads on each member (the cache holds neither all nodes nor every
pod); an apply itself makes neither call."""


RESTRICTED = EgressPolicy(
    allow=(
        EgressRule(destination="203.0.113.0/24", ports=(5432,)),
        EgressRule(destination="api.example.com", ports=(443,)),
    )
)


def plan(
    i: int, *, first_deploy: bool = False, restricted: bool = False, exposed: bool = False
) -> BundlePlan:
    web = WorkloadPlan(
        name="web",
        image="registry.example/bench/app:1",
        env={"INDEX": str(i), "SECRET": "x" * 32},
        ports=(Port(8080),),
        resources=Resources(cpu_millis=10, memory_bytes=16 * 1024**2),
        exposed=exposed,
    )
    if restricted:
        network = NetworkPlan(egress=RESTRICTED)
        return BundlePlan(bundle_id=f"bench-egress-{i:04d}", workloads=(web,), network=network)
    prefix = "bench-exposed" if exposed else "bench"
    return BundlePlan(bundle_id=f"{prefix}-{i:04d}", workloads=(web,), first_deploy=first_deploy)


def _writes(adapter: KubernetesAdapter) -> int:
    return sum(
        n
        for kind, n in adapter.session.connection.calls_by_kind.items()
        if not kind.startswith("GET")
    )


async def measure_variant(
    config: dict[str, Any], plans: list[BundlePlan], concurrency: int, label: str
) -> None:
    """First apply and re-apply of ``plans``, apps of one kind (restricted, exposed)."""
    apps = len(plans)
    async with KubernetesAdapter(config) as adapter:
        assert adapter.cache is not None
        await adapter.cache.wait_synced(30)
        api = await adapter.session.connection.transport()
        # The nodes' pod slots come back only once the first apps' deleted pods are gone.
        with anyio.move_on_after(SAMPLE_WAIT):
            while (await api.get("/api/v1/pods", labelSelector=MANAGED_SELECTOR))["items"]:  # noqa: ASYNC110 - polls the cluster
                await anyio.sleep(1)
        limiter = anyio.CapacityLimiter(concurrency)

        async def each() -> float:
            start = time.perf_counter()
            async with anyio.create_task_group() as group:
                for p in plans:

                    async def one(p: BundlePlan = p) -> None:
                        async with limiter:
                            await adapter.apply(p)

                    group.start_soon(one)
            return time.perf_counter() - start

        for step in (f"{label} first apply:", f"{label} re-apply:  "):
            calls, writes = adapter.api_calls, _writes(adapter)
            seconds = await each()
            print(
                f"{step} {(adapter.api_calls - calls) / apps:.2f} API calls per app, "
                f"{(_writes(adapter) - writes) / apps:.2f} writes ({seconds:.2f} s, {apps} apps)"
            )
        async with anyio.create_task_group() as group:
            for p in plans:
                group.start_soon(adapter.destroy, BundleRef(p.bundle_id))


def sessions(adapter: RuntimeAdapter) -> list[ClusterSession]:
    """The cluster session of every cluster the adapter drives."""
    if isinstance(adapter, MultiClusterAdapter):
        return [m.session for m in adapter.members.values()]
    assert isinstance(adapter, KubernetesAdapter)
    return [adapter.session]


def api_calls(adapter: RuntimeAdapter) -> int:
    return sum(s.connection.api_calls for s in sessions(adapter))


def placement_calls(adapter: RuntimeAdapter) -> int:
    return sum(
        s.connection.calls_by_kind.get(kind, 0)
        for s in sessions(adapter)
        for kind in PLACEMENT_READS
    )


async def measure_usage(
    adapter: KubernetesAdapter | MultiClusterAdapter, plans: list[BundlePlan]
) -> None:
    """API calls and seconds of ``usage`` over every app and of one ``in_use``."""
    if not (await adapter.capabilities()).reports_usage:
        print("usage:        the cluster serves no metrics API")
        return
    apps = len(plans)
    with anyio.move_on_after(SAMPLE_WAIT):  # metrics-server samples new pods within ~40 s
        while (await adapter.in_use()).memory_bytes < apps * MIN_SAMPLE:  # noqa: ASYNC110 - polls the cluster
            await anyio.sleep(2)
    calls = adapter.api_calls
    start = time.perf_counter()
    usages = [await adapter.usage(BundleRef(p.bundle_id)) for p in plans]
    seconds = time.perf_counter() - start
    sampled = sum(w.memory_bytes >= 0 for u in usages for w in u.workloads)
    print(
        f"usage:        {(adapter.api_calls - calls) / apps:.2f} API calls per app; "
        f"one pass over {apps} apps: {seconds:.3f} s ({sampled} workloads sampled)"
    )
    calls = adapter.api_calls
    start = time.perf_counter()
    total = await adapter.in_use()
    print(
        f"in_use:       {adapter.api_calls - calls} API call(s), "
        f"{time.perf_counter() - start:.3f} s ({total.memory_bytes / 2**20:.0f} MiB in use)"
    )


async def report_placement(
    adapter: MultiClusterAdapter, plans: list[BundlePlan], placing: int
) -> None:
    """The placement's reads per new app, and how many apps each cluster got."""
    where = dict.fromkeys(adapter.members, 0)
    for p in plans:
        where[str(await adapter.locate(p.bundle_id))] += 1
    print(
        f"placement:    {placing / len(plans):.2f} API calls per new app (nodes and pods of "
        f"{len(where)} clusters); apps per cluster: "
        + ", ".join(f"{name} {n}" for name, n in where.items())
    )


async def measure_cache(adapter: RuntimeAdapter) -> None:
    """The memory one cached pod takes (the first cluster's pods)."""
    api = await sessions(adapter)[0].connection.transport()
    items = (await api.get("/api/v1/pods", labelSelector=MANAGED_SELECTOR))["items"]
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    store = PodStore()
    store.on_list([f for f in map(store.project, items) if f is not None], relist=False)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    size = sum(s.size_diff for s in after.compare_to(before, "filename"))
    print(f"cache:        {size / max(1, len(store)):.0f} bytes per cached pod ({len(store)} pods)")


async def all_running(adapter: RuntimeAdapter, plans: list[BundlePlan]) -> None:
    with anyio.fail_after(120):
        while True:
            states = [await adapter.observe(BundleRef(p.bundle_id)) for p in plans]
            if all(s.all_running for s in states):
                return
            await anyio.sleep(0.5)


SETTINGS: dict[str, Any] = {
    "trust_network_policy": True,
    "api_qps": 1000.0,
    "api_burst": 200,
    "schedule_wait": 30.0,
}


def build_adapter(kubeconfig: str, clusters: int) -> KubernetesAdapter | MultiClusterAdapter:
    """The adapter over one cluster, or the multi-cluster one over every context."""
    if clusters == 1:
        return KubernetesAdapter({**SETTINGS, "kubeconfig": kubeconfig})
    return MultiClusterAdapter({"kubeconfig": kubeconfig, "settings": SETTINGS})


async def run(kubeconfig: str, apps: int, concurrency: int, clusters: int) -> None:
    async with build_adapter(kubeconfig, clusters) as adapter:
        for session in sessions(adapter):
            informer = session.cache.informer
            assert informer is not None
            await informer.wait_synced(30)
        many = clusters > 1
        plans = [plan(i, first_deploy=many) for i in range(apps)]
        limiter = anyio.CapacityLimiter(concurrency)

        async def each(fn: Any) -> float:
            start = time.perf_counter()
            async with anyio.create_task_group() as group:
                for p in plans:

                    async def one(p: BundlePlan = p) -> None:
                        async with limiter:
                            await fn(p)

                    group.start_soon(one)
            return time.perf_counter() - start

        calls, placing = api_calls(adapter), placement_calls(adapter)
        seconds = await each(adapter.apply)
        placing = placement_calls(adapter) - placing
        first = (api_calls(adapter) - calls - placing) / apps
        print(f"first apply:  {first:.2f} API calls per app ({seconds:.1f} s for {apps} apps)")
        if isinstance(adapter, MultiClusterAdapter):
            await report_placement(adapter, plans, placing)
        await all_running(adapter, plans)
        calls = api_calls(adapter)
        seconds = await each(adapter.apply)
        print(
            f"re-apply:     {(api_calls(adapter) - calls) / apps:.2f} API calls per app "
            f"({seconds:.2f} s)"
        )
        calls = api_calls(adapter)
        start = time.perf_counter()
        for p in plans:
            await adapter.observe(BundleRef(p.bundle_id))
        seconds = time.perf_counter() - start
        print(
            f"observe:      {(api_calls(adapter) - calls) / apps:.2f} API calls per app; "
            f"one pass over {apps} apps"
            + (f" across {clusters} clusters" if many else "")
            + f": {seconds:.4f} s"
        )
        await measure_usage(adapter, plans)
        await measure_cache(adapter)
        async with anyio.create_task_group() as group:
            for p in plans:
                group.start_soon(adapter.destroy, BundleRef(p.bundle_id))
    if clusters == 1:
        config = {**SETTINGS, "kubeconfig": kubeconfig}
        some = range(max(1, apps // 4))
        restricted = {**config, "trust_egress_policy": True, "egress_gateway_image": "squid:5"}
        await measure_variant(
            restricted, [plan(i, restricted=True) for i in some], concurrency, "egress"
        )
        await measure_variant(config, [plan(i, exposed=True) for i in some], concurrency, "exposed")


def local_clusters(
    stack: contextlib.ExitStack, count: int, apps: int, minor: str | None = None
) -> str:
    """Start ``count`` local control planes at once; the kubeconfig holding every one."""
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localcluster import DEFAULT_NODES, LocalCluster, NodeSpec  # noqa: PLC0415
    from localcluster.kubeconfig import merge_kubeconfigs  # noqa: PLC0415

    if count == 1:
        return str(stack.enter_context(LocalCluster(minor=minor)).kubeconfig)
    # Room for every pod wherever placement puts it (an even split, plus a margin).
    per_node = math.ceil(apps * 1.2 / count / len(DEFAULT_NODES)) + PODS_PER_NODE
    nodes = [NodeSpec(n.name, n.cpu, "64Gi", pods=per_node) for n in DEFAULT_NODES]
    clusters = [
        stack.enter_context(LocalCluster(name=f"bench-{i}", nodes=nodes, minor=minor))
        for i in range(count)
    ]
    work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kube-apps-")))
    return str(merge_kubeconfigs(work / "kubeconfig", [c.kubeconfig for c in clusters]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--apps", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--clusters", type=int, default=1)
    parser.add_argument("--kubeconfig", help="one cluster's (or, with --clusters, every one's)")
    parser.add_argument("--minor", help="an older Kubernetes minor's control plane, e.g. 1.33")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        kubeconfig = args.kubeconfig or local_clusters(stack, args.clusters, args.apps, args.minor)
        anyio.run(run, kubeconfig, args.apps, args.concurrency, args.clusters)


if __name__ == "__main__":
    main()
