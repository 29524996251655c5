"""Benchmark: API calls per operation and cache cost with many apps on a real API server.

    python adapters/kubernetes/benchmarks/kube_apps.py [--apps 200] [--kubeconfig PATH]

Without ``--kubeconfig`` it starts the local control plane (tests/support/localcluster).
Prints API calls per first apply, per re-apply and per observe, the seconds of one observe pass
over all apps, and the memory one cached pod takes; where the cluster serves the metrics API,
API calls and seconds of ``usage`` over all apps and of one ``in_use``. Then the same for apps
whose egress is restricted (a CIDR rule and a host name, so each has an egress gateway),
first apply and re-apply, with the writes among the calls.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._cache import PodStore
from pando_runtime_kubernetes._names import MANAGED_SELECTOR

from pando_runtime import (
    BundlePlan,
    BundleRef,
    EgressPolicy,
    EgressRule,
    NetworkPlan,
    Port,
    Resources,
    WorkloadPlan,
)

ROOT = Path(__file__).resolve().parents[3]
SAMPLE_WAIT = 120
MIN_SAMPLE = 2**20
"""What a pod uses at least, where kwok simulates usage (1 MiB)."""


RESTRICTED = EgressPolicy(
    allow=(
        EgressRule(destination="203.0.113.0/24", ports=(5432,)),
        EgressRule(destination="api.example.com", ports=(443,)),
    )
)


def plan(i: int, *, restricted: bool = False) -> BundlePlan:
    web = WorkloadPlan(
        name="web",
        image="registry.example/bench/app:1",
        env={"INDEX": str(i), "SECRET": "x" * 32},
        ports=(Port(8080),),
        resources=Resources(cpu_millis=10, memory_bytes=16 * 1024**2),
    )
    if restricted:
        network = NetworkPlan(egress=RESTRICTED)
        return BundlePlan(bundle_id=f"bench-egress-{i:04d}", workloads=(web,), network=network)
    return BundlePlan(bundle_id=f"bench-{i:04d}", workloads=(web,))


def _writes(adapter: KubernetesAdapter) -> int:
    return sum(n for kind, n in adapter.session.calls_by_kind.items() if not kind.startswith("GET"))


async def measure_restricted(config: dict[str, Any], apps: int, concurrency: int) -> None:
    """First apply and re-apply of apps with restricted egress (each with a gateway)."""
    restricted = {**config, "trust_egress_policy": True, "egress_gateway_image": "squid:5"}
    async with KubernetesAdapter(restricted) as adapter:
        assert adapter.cache is not None
        await adapter.cache.wait_synced(30)
        plans = [plan(i, restricted=True) for i in range(apps)]
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

        for label in ("egress first apply:", "egress re-apply:  "):
            calls, writes = adapter.api_calls, _writes(adapter)
            seconds = await each()
            print(
                f"{label} {(adapter.api_calls - calls) / apps:.2f} API calls per app, "
                f"{(_writes(adapter) - writes) / apps:.2f} writes ({seconds:.2f} s, {apps} apps)"
            )
        async with anyio.create_task_group() as group:
            for p in plans:
                group.start_soon(adapter.destroy, BundleRef(p.bundle_id))


async def measure_usage(adapter: KubernetesAdapter, plans: list[BundlePlan]) -> None:
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


async def run(kubeconfig: str, apps: int, concurrency: int) -> None:
    config: dict[str, Any] = {
        "kubeconfig": kubeconfig,
        "trust_network_policy": True,
        "api_qps": 1000.0,
        "api_burst": 200,
        "schedule_wait": 30.0,
    }
    async with KubernetesAdapter(config) as adapter:
        assert adapter.cache is not None
        await adapter.cache.wait_synced(30)
        plans = [plan(i) for i in range(apps)]
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

        calls = adapter.api_calls
        seconds = await each(adapter.apply)
        first = (adapter.api_calls - calls) / apps
        print(f"first apply:  {first:.2f} API calls per app ({seconds:.1f} s for {apps} apps)")
        with anyio.fail_after(120):
            while True:
                states = [await adapter.observe(BundleRef(p.bundle_id)) for p in plans]
                if all(s.all_running for s in states):
                    break
                await anyio.sleep(0.5)
        calls = adapter.api_calls
        seconds = await each(adapter.apply)
        print(
            f"re-apply:     {(adapter.api_calls - calls) / apps:.2f} API calls per app "
            f"({seconds:.2f} s)"
        )
        calls = adapter.api_calls
        start = time.perf_counter()
        for p in plans:
            await adapter.observe(BundleRef(p.bundle_id))
        seconds = time.perf_counter() - start
        print(
            f"observe:      {(adapter.api_calls - calls) / apps:.2f} API calls per app; "
            f"one pass over {apps} apps: {seconds:.4f} s"
        )
        await measure_usage(adapter, plans)
        api = await adapter.session.transport()
        items = (await api.get("/api/v1/pods", labelSelector=MANAGED_SELECTOR))["items"]
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        store = PodStore()
        store.on_list([f for f in map(store.project, items) if f is not None], relist=False)
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        size = sum(s.size_diff for s in after.compare_to(before, "filename"))
        print(
            f"cache:        {size / max(1, len(store)):.0f} bytes per cached pod "
            f"({len(store)} pods)"
        )
        async with anyio.create_task_group() as group:
            for p in plans:
                group.start_soon(adapter.destroy, BundleRef(p.bundle_id))
    await measure_restricted(config, max(1, apps // 4), concurrency)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--apps", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--kubeconfig")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        kubeconfig = args.kubeconfig
        if kubeconfig is None:
            sys.path.insert(0, str(ROOT / "tests" / "support"))
            from localcluster import LocalCluster  # noqa: PLC0415

            cluster = stack.enter_context(LocalCluster())
            kubeconfig = str(cluster.kubeconfig)
        anyio.run(run, kubeconfig, args.apps, args.concurrency)


if __name__ == "__main__":
    main()
