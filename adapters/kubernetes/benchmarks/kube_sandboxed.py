"""Benchmark: sandboxed apps (gVisor) against ordinary ones (runc) on the real node, in one run.

    python adapters/kubernetes/benchmarks/kube_sandboxed.py [--apps 5] [--requests 200]

It starts a local control plane with a real node (``LocalCluster(real_node=True)``, whose
containerd has the handler ``runsc`` and the cluster the RuntimeClass ``gvisor``) and drives
the adapter with the admin kubeconfig (``kube_real_node.py``'s settings). For each class,
ordinary (``pando-real``, runc) then sandboxed (``gvisor``, runsc), it prints:

- apply to running: ``--apps`` apps of one ``sleep`` workload applied one at a time, the
  seconds from ``apply`` to ``observe`` saying running (p50, p99, max);
- memory per pod: of those apps' pods, what their pod cgroup holds (``memory.usage_in_bytes``
  and ``total_rss`` of ``memory.stat``: for a sandboxed pod the Sentry and the gofer's
  processes that runsc puts there, for an ordinary one the container's);
- HTTP latency: ``--requests`` HTTP/1.0 GETs, one at a time, from the node's network namespace
  to an httpd app's pod address (a connection each; the thread's setns is in both classes'
  figures alike): p50 and p99.

Needs root and what ``localcluster.realnode.setup.missing()`` checks; where the machine lacks
any of it, prints one line saying so and exits 0. Prints figures; asserts only that the run did
what it says (every app running, every request answered).
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from http import HTTPStatus
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from kube_real_node import SCRIPT, skip_reason
from kube_real_node import adapter_settings as real_node_settings
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import namespace_for

from pando_runtime import BundlePlan, BundleRef, IsolationClass, Port, WorkloadPlan

POLL = 0.1
"""Seconds between two observes (observe reads the adapter's cache)."""
RUNNING_WAIT = 120.0
HTTPD = "mkdir -p /tmp/w && echo ok > /tmp/w/index.html && exec httpd -f -p 8080 -h /tmp/w"
CLASSES = (("runc", IsolationClass.CONTAINER), ("runsc", IsolationClass.SANDBOXED))


def out(text: str = "") -> None:
    print(text, flush=True)


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def plan(
    bundle_id: str, image: str, script: str, isolation: IsolationClass, *ports: Port
) -> BundlePlan:
    main = WorkloadPlan(name="main", image=image, entrypoint=("sh", "-c", script), ports=ports)
    return BundlePlan(bundle_id=bundle_id, workloads=(main,), isolation=isolation)


def pod_of(cluster: Any, bundle_id: str) -> dict[str, Any]:
    path = f"/api/v1/namespaces/{namespace_for(bundle_id)}/pods"
    status, body = cluster.rest.get(path)
    assert status == HTTPStatus.OK, f"GET {path}: {status}"
    pod: dict[str, Any] = body["items"][0]
    return pod


def pod_memory(cluster: Any, uid: str) -> tuple[int, int]:
    """``(usage_in_bytes, total_rss)`` of the pod's memory cgroup (cgroup v1)."""
    root = Path("/sys/fs/cgroup/memory", cluster.real_node.cgroup_root.lstrip("/"))
    found = next(root.rglob(f"pod{uid}"))
    stat = dict(line.split() for line in (found / "memory.stat").read_text().splitlines())
    return int((found / "memory.usage_in_bytes").read_text()), int(stat["total_rss"])


async def to_running(adapter: KubernetesAdapter, bundle_id: str, p: BundlePlan) -> float:
    t0 = time.monotonic()
    await adapter.apply(p)
    with anyio.fail_after(RUNNING_WAIT):
        while True:
            if (await adapter.observe(BundleRef(bundle_id))).all_running:
                return time.monotonic() - t0
            await anyio.sleep(POLL)


def http_latencies(cluster: Any, host: str, count: int) -> list[float]:
    from localcluster.realnode import netns  # noqa: PLC0415

    node_ns = cluster.real_node.network.node
    seconds = []
    for _ in range(count):
        t0 = time.perf_counter()
        answer = netns.connects_from(node_ns, host, 8080)
        seconds.append(time.perf_counter() - t0)
        assert answer is not None, f"no answer from {host}"
        assert answer.endswith(b"ok\n"), answer
    return seconds


async def measure(cluster: Any, args: argparse.Namespace) -> None:
    from localcluster import images  # noqa: PLC0415

    rows = []
    async with KubernetesAdapter(real_node_settings(cluster)) as adapter:
        assert (await adapter.capabilities()).isolation_class is IsolationClass.SANDBOXED
        for label, isolation in CLASSES:
            ids = [f"sb-{label}-{i:02d}" for i in range(args.apps)]
            starts = []
            for bundle_id in ids:
                p = plan(bundle_id, images.WORKLOAD, SCRIPT, isolation)
                starts.append(await to_running(adapter, bundle_id, p))
            await anyio.sleep(2)  # the pods settle after their start
            memory = [pod_memory(cluster, pod_of(cluster, b)["metadata"]["uid"]) for b in ids]
            web = f"sb-{label}-web"
            await to_running(adapter, web, plan(web, images.WORKLOAD, HTTPD, isolation, Port(8080)))
            pod = pod_of(cluster, web)
            expected = "gvisor" if isolation is IsolationClass.SANDBOXED else "pando-real"
            assert pod["spec"]["runtimeClassName"] == expected
            latencies = await anyio.to_thread.run_sync(
                http_latencies, cluster, pod["status"]["podIP"], args.requests
            )
            rows.append((label, starts, memory, latencies))
            for bundle_id in [*ids, web]:
                await adapter.destroy(BundleRef(bundle_id))
            progress(f"{label}: done")
    mib = 2**20
    when = f"{dt.datetime.now(dt.UTC):%Y-%m-%d}"
    out(f"kube_sandboxed ({when}, {args.apps} apps per class, {args.requests} requests)")
    out(
        "| class | apply to running p50 / p99 / max (s) | pod memory usage / rss (MiB) "
        "| HTTP p50 / p99 (ms) |"
    )
    out("|---|---|---|---|")
    for label, starts, memory, latencies in rows:
        usage = statistics.mean(m[0] for m in memory) / mib
        rss = statistics.mean(m[1] for m in memory) / mib
        out(
            f"| {label} | {quantile(starts, 0.5):.2f} / {quantile(starts, 0.99):.2f} / "
            f"{max(starts):.2f} | {usage:.1f} / {rss:.1f} | "
            f"{quantile(latencies, 0.5) * 1000:.2f} / {quantile(latencies, 0.99) * 1000:.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--apps", type=int, default=5, help="apps of each class")
    parser.add_argument("--requests", type=int, default=200, help="HTTP requests per class")
    args = parser.parse_args()
    reason = skip_reason()  # puts the harness on the path
    if reason is not None:
        out(f"kube_sandboxed: skipped, this machine cannot run a real node: it lacks {reason}")
        return
    from localcluster import LocalCluster  # noqa: PLC0415

    t0 = time.monotonic()
    cluster = LocalCluster(name="bench-sandboxed", real_node=True)
    cluster.start()
    try:
        out(f"(cluster with a real node up in {time.monotonic() - t0:.1f} s)")
        anyio.run(measure, cluster, args)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
