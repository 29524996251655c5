"""Benchmark: a neighbour app's answers beside a CPU hog and a fork bomb, on a real node.

    python adapters/kubernetes/benchmarks/kube_neighbours.py [--requests 200]
        [--hog-millis 500] [--bomb-millis 300] [--neighbour-millis 100]

Starts a local control plane with its real node (as ``kube_real_node.py``), applies a
neighbour app (busybox ``httpd``, asking ``--neighbour-millis`` of CPU: a pod that asks none is
BestEffort, with the least CPU weight on a busy node), then times ``--requests`` HTTP requests
to its pod from the node's own namespace (as kubelet's probes come) in three phases: alone,
beside an app spinning on the CPU under its limit (``--hog-millis``), and beside a fork bomb
held to the node's pids limit (under ``--bomb-millis``, so its refused forks cannot take both
cores). Prints p50, p99
and max per phase, with the hog's throttled periods and the bomb's refused forks (from the
node's cgroups). These are figures of this machine, not guarantees: the tests
(``test_real_node_hardening``) assert that the neighbour answers, never how fast.

Needs root and what ``localcluster.realnode.setup.missing()`` checks; where the machine lacks
any of it, prints one line saying so and exits 0.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from kube_real_node import ROOT, adapter_settings, quantile, real_node, skip_reason
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import LABEL_WORKLOAD, namespace_for

from pando_runtime import BundlePlan, BundleRef, Port, Resources, WorkloadPlan

if TYPE_CHECKING:  # the test support packages join the path in main()
    from kubernetes.client import V1Pod
    from localcluster import LocalCluster

CGROUPS = Path("/sys/fs/cgroup")
PORT = 8080
SETTLE = 5.0
"""Seconds a phase's disturbance runs before its requests start (the bomb reaches its limit)."""


def out(text: str = "") -> None:
    print(text, flush=True)


def busybox(name: str, script: str, **fields: Any) -> WorkloadPlan:
    from localcluster import images  # noqa: PLC0415

    return WorkloadPlan(name=name, image=images.WORKLOAD, entrypoint=("sh", "-c", script), **fields)


def pod_of(cluster: LocalCluster, bundle: str, workload: str) -> V1Pod:
    from kubeadmin import admin_client  # noqa: PLC0415
    from kubernetes import client  # noqa: PLC0415

    with admin_client(cluster.kubeconfig) as api:
        pods = client.CoreV1Api(api).list_namespaced_pod(
            namespace_for(bundle), label_selector=f"{LABEL_WORKLOAD}={workload}"
        )
    return pods.items[0]


def cgroup_file(controller: str, cluster: LocalCluster, name: str, file: str) -> Path:
    base = CGROUPS / controller / real_node(cluster).cgroup_root.strip("/")
    return next(p for p in base.rglob(name) if p.is_dir()) / file


def counters(paths: list[Path], key: str) -> int:
    total = 0
    for path in paths:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                total += int(value)
    return total


def request_seconds(netns_name: str, address: str) -> float | None:
    """One HTTP GET from the node's namespace: seconds to the whole answer (None: failed)."""
    from localcluster.realnode.netns import connects_from  # noqa: PLC0415

    t0 = time.perf_counter()
    data = connects_from(netns_name, address, PORT, timeout=10)
    seconds = time.perf_counter() - t0
    return seconds if data is not None and data.endswith(b"ok-web\n") else None


async def phase(cluster: LocalCluster, address: str, requests: int) -> tuple[list[float], int]:
    netns_name = real_node(cluster).network.node
    times: list[float] = []
    failed = 0
    for _ in range(requests):
        seconds = await anyio.to_thread.run_sync(request_seconds, netns_name, address)
        if seconds is None:
            failed += 1
        else:
            times.append(seconds)
    return times, failed


async def until_running(adapter: KubernetesAdapter, bundle: str) -> None:
    with anyio.fail_after(180):
        while not (await adapter.observe(BundleRef(bundle))).all_running:  # noqa: ASYNC110
            await anyio.sleep(0.5)


async def measure(cluster: LocalCluster, args: argparse.Namespace) -> list[list[str]]:
    rows: list[list[str]] = []
    async with KubernetesAdapter(adapter_settings(cluster)) as adapter:
        page = "mkdir -p /w && echo ok-web > /w/index.html"
        web = busybox(
            "web",
            f"{page} && exec httpd -f -p {PORT} -h /w",
            ports=(Port(PORT),),
            resources=Resources(cpu_millis=args.neighbour_millis)
            if args.neighbour_millis
            else Resources(),
        )
        await adapter.apply(BundlePlan(bundle_id="neighbour", workloads=(web,)))
        await until_running(adapter, "neighbour")
        pod = await anyio.to_thread.run_sync(pod_of, cluster, "neighbour", "web")
        address = pod.status.pod_ip if pod.status is not None else None
        assert address, "a running pod has its address"
        disturbances = [
            ("alone", None, ""),
            ("beside a CPU hog", busybox("hog", "while :; do :; done",
                                         resources=Resources(cpu_millis=args.hog_millis)), "hog"),
            ("beside a fork bomb", busybox("bomb", "b() { b | b & }; sleep 2; b; exec sleep 3600",
                                           resources=Resources(cpu_millis=args.bomb_millis)),
             "bomb"),
        ]  # fmt: skip
        for label, workload, name in disturbances:
            note = ""
            if workload is not None:
                await adapter.apply(BundlePlan(bundle_id=name, workloads=(workload,)))
                await until_running(adapter, name)
                await anyio.sleep(SETTLE)
            times, failed = await phase(cluster, address, args.requests)
            if workload is not None:
                noisy = await anyio.to_thread.run_sync(pod_of, cluster, name, name)
                assert noisy.metadata is not None, "a listed pod has its metadata"
                uid = f"pod{noisy.metadata.uid}"
                if name == "hog":
                    pod_dir = cgroup_file("cpu", cluster, uid, "cpu.stat").parent
                    throttled = counters(list(pod_dir.rglob("cpu.stat")), "nr_throttled")
                    note = f"{throttled} periods throttled (pod and container)"
                else:
                    pod_dir = cgroup_file("pids", cluster, uid, "pids.events").parent
                    refused = counters(list(pod_dir.rglob("pids.events")), "max")
                    current = (pod_dir / "pids.current").read_text().strip()
                    note = f"{current} processes, {refused} forks refused"
                await adapter.destroy(BundleRef(name))
            rows.append(row(label, times, failed, note))
            out(f"  {label}: done")
        await adapter.destroy(BundleRef("neighbour"))
    return rows


def row(label: str, times: list[float], failed: int, note: str) -> list[str]:
    ms = [t * 1000 for t in times]
    if not ms:
        return [label, "-", "-", "-", str(failed), note]
    return [
        label,
        f"{statistics.median(ms):.1f}",
        f"{quantile(ms, 0.99):.1f}",
        f"{max(ms):.1f}",
        str(failed),
        note,
    ]


def run(args: argparse.Namespace) -> None:
    from localcluster import LocalCluster  # noqa: PLC0415

    started = dt.datetime.now(dt.UTC)
    load = os.getloadavg()
    cluster = LocalCluster(name="bench-neighbours", real_node=True)
    cluster.start()
    try:
        rows = anyio.run(measure, cluster, args)
    finally:
        cluster.stop()
    out(f"\n{started:%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, load before {load[0]:.1f}; "
        f"{args.requests} requests per phase from the node's namespace; neighbour "
        f"{args.neighbour_millis}m, hog {args.hog_millis}m, bomb {args.bomb_millis}m")  # fmt: skip
    header = ["neighbour's answers", "p50 ms", "p99 ms", "max ms", "failed", "the other app"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        out("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=200, help="requests per phase")
    parser.add_argument("--hog-millis", type=int, default=500, help="the CPU hog's limit")
    parser.add_argument(
        "--neighbour-millis",
        type=int,
        default=100,
        help="the neighbour's CPU (0: none, so a BestEffort pod with the least CPU weight)",
    )
    parser.add_argument("--bomb-millis", type=int, default=300, help="the fork bomb's CPU limit")
    args = parser.parse_args()
    reason = skip_reason()
    if reason is not None:
        out(f"kube_neighbours: skipped, this machine cannot run a real node: it lacks {reason}")
        return
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    run(args)


if __name__ == "__main__":
    main()
