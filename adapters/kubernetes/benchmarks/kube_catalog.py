"""Benchmark: a cluster's Services into a real Consul, with 1,000 Services.

    python adapters/kubernetes/benchmarks/kube_catalog.py [--services 1000] [--changes 50]

Without ``--kubeconfig`` it starts the local control plane (tests/support/localcluster); it
always starts its own ``consul agent -dev`` (tests/support/localconsul). Creates the Services,
runs a ServiceSource into a CatalogSyncer over the Consul backend, and prints: the time until
the first whole set is in Consul; Kubernetes API calls and Consul HTTP calls per full sync
period at steady state; and change-to-registration latency (p50/p99) from a Service's port
patched in the API server to the registration's rewrite acknowledged by Consul. Prints figures;
asserts nothing about time.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import uuid
from pathlib import Path

import anyio
from pando_runtime_consul import ConsulCatalog, ConsulConfig
from pando_runtime_kubernetes import (
    ApiRate,
    ClusterSet,
    KubeTransport,
    ServiceSource,
    ServiceSyncOptions,
)

import pando_runtime as pr

ROOT = Path(__file__).resolve().parents[3]
RATE = ApiRate(qps=500.0, burst=200)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def create_services(admin: KubeTransport, path: str, services: int) -> None:
    limiter = anyio.CapacityLimiter(20)
    start = time.perf_counter()

    async def create(i: int) -> None:
        body = {
            "metadata": {"name": f"svc-{i}"},
            "spec": {"ports": [{"name": "http", "port": 80}], "selector": {"app": f"a{i}"}},
        }
        async with limiter:
            await admin.request("POST", path, body=body)

    async with anyio.create_task_group() as group:
        for i in range(services):
            group.start_soon(create, i)
    print(f"created {services} Services in {time.perf_counter() - start:.1f} s")


async def change_latency(
    admin: KubeTransport,
    *,
    path: str,
    namespace: str,
    services: int,
    changes: int,
    written: dict[str, float],
    changed: dict[str, anyio.Event],
) -> None:
    latencies = []
    for n in range(changes):
        name = f"svc-{n % services}"
        service_id = f"{namespace}/{name}"
        written.pop(service_id, None)
        patch = [{"op": "replace", "path": "/spec/ports/0/port", "value": 1000 + n}]
        at = time.perf_counter()
        await admin.request(
            "PATCH",
            f"{path}/{name}",
            body=patch,
            content_type="application/json-patch+json",
        )
        with anyio.fail_after(60):
            while service_id not in written:
                changed["event"] = anyio.Event()
                await changed["event"].wait()
        latencies.append(written[service_id] - at)
    print(
        f"change to registration: p50 {percentile(latencies, 0.5) * 1000:.0f} ms, "
        f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms, max "
        f"{max(latencies) * 1000:.0f} ms ({changes} port changes, {services} Services)"
    )


async def run(kubeconfig: str, address: str, services: int, changes: int, periods: int) -> None:
    clusters = await anyio.to_thread.run_sync(lambda: ClusterSet.load(kubeconfig))
    cluster = clusters.cluster()
    admin = KubeTransport.for_cluster(cluster.with_rate(RATE))
    watcher = KubeTransport.for_cluster(cluster.with_rate(RATE))
    namespace = f"bench-catalog-{uuid.uuid4().hex[:6]}"
    await admin.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    path = f"/api/v1/namespaces/{namespace}/services"
    await create_services(admin, path, services)

    backend = ConsulCatalog(ConsulConfig(address=address))
    written: dict[str, float] = {}
    changed = {"event": anyio.Event()}

    def on_change(change: pr.catalog.SyncChange) -> None:
        written[change.service_id] = time.perf_counter()
        changed["event"].set()

    node = "k8s-bench"
    syncer = pr.catalog.CatalogSyncer(backend, nodes=(node,), on_change=on_change)
    options = ServiceSyncOptions(allow_namespaces=namespace, node=node)
    source = ServiceSource(watcher, syncer, options)
    try:
        start = time.perf_counter()
        async with syncer.running(), source.running():
            with anyio.fail_after(600):
                await syncer.wait_desired_known()
                await syncer.wait_applied()
            print(
                f"first whole set: {syncer.status.owned} registered in "
                f"{time.perf_counter() - start:.1f} s; Consul HTTP calls {dict(backend.requests)}"
            )
            await syncer.wait_full_sync()
            kube_calls, consul_before = watcher.calls, dict(backend.requests)
            t0 = time.perf_counter()
            target = syncer.status.full_syncs + periods
            while syncer.status.full_syncs < target:
                await syncer.wait_pass()
            seconds = time.perf_counter() - t0
            per = {
                k: (v - consul_before.get(k, 0)) / periods
                for k, v in backend.requests.items()
                if v - consul_before.get(k, 0)
            }
            print(
                f"steady state over {periods} periods ({seconds:.1f} s): Consul HTTP calls per "
                f"period {per}; Kubernetes API calls per period "
                f"{(watcher.calls - kube_calls) / periods:.1f} (the watches stay open)"
            )
            await change_latency(
                admin,
                path=path,
                namespace=namespace,
                services=services,
                changes=changes,
                written=written,
                changed=changed,
            )
            print(f"cleanup: {await syncer.cleanup()} registrations removed")
    finally:
        await backend.aclose()
        await admin.request("DELETE", f"/api/v1/namespaces/{namespace}")
        admin.close()
        watcher.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--changes", type=int, default=50)
    parser.add_argument("--periods", type=int, default=3)
    parser.add_argument("--kubeconfig")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localconsul import ConsulAgent  # noqa: PLC0415

    with contextlib.ExitStack() as stack:
        kubeconfig = args.kubeconfig
        if kubeconfig is None:
            from localcluster import LocalCluster  # noqa: PLC0415

            kubeconfig = str(stack.enter_context(LocalCluster()).kubeconfig)
        agent = stack.enter_context(ConsulAgent())
        anyio.run(run, kubeconfig, agent.http_address, args.services, args.changes, args.periods)


if __name__ == "__main__":
    main()
