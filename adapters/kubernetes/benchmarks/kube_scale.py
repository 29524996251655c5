"""Benchmark: the Kubernetes adapter with thousands of apps on one control plane, and the naive way.

    python adapters/kubernetes/benchmarks/kube_scale.py [--apps 1000 5000 10000]
        [--concurrency 16] [--qps 1000] [--burst 200] [--profile] [--json FILE]

For each N it starts a fresh local control plane (tests/support/localcluster) with enough kwok
nodes for every pod, applies N one-workload apps and prints: first-apply throughput and latency;
API calls per first apply, re-apply, observe and destroy, counted by the adapter and by the API
server (``apiserver_request_total``, every client: the cluster's own reactions included); CPU of
every process during the apply; cold start of a fresh adapter process (to its first answered
observe), the bytes it received, its RSS growth per app and the cache's bytes per pod; an
observe pass over all N; ``capacity`` and ``largest_fit_for`` in a read scope; the latency from
a pod's phase change (a kwok stage, seen by an independent watch in another process) to the
``BundleEvent`` the host receives; destroy throughput; and the naive way (the official client's
typed reads of the namespace, its pods, Services and claims per app per observe) with its
observe pass, memory and the ratio. Prints figures; asserts only that the run did what it says.

Child processes (``_kube_scale_children.py``) measure what must not share the applying process.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import io
import json
import math
import os
import pstats
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import anyio

if TYPE_CHECKING:  # annotations only: the adapter and the harness load where they are used
    from localcluster import LocalCluster
    from pando_runtime_kubernetes import KubernetesAdapter, KubeTransport

    from pando_runtime import BundlePlan

ROOT = Path(__file__).resolve().parents[3]
CHILDREN = Path(__file__).with_name("_kube_scale_children.py")
SELECTOR = "app.kubernetes.io/managed-by=pando"
PODS_PER_NODE = 1000
EXIT_CODE_ANNOTATION = "test.pando.dev/exit-code"  # the local cluster's kwok exit stage
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def bundle_id(i: int) -> str:
    return f"scale-{i:05d}"


def plan(i: int) -> BundlePlan:
    import pando_runtime as pr  # noqa: PLC0415 - children that never plan stay light

    web = pr.WorkloadPlan(
        name="web",
        image="registry.example/bench/app:1",
        env={"INDEX": str(i)},
        ports=(pr.Port(8080),),
        resources=pr.Resources(cpu_millis=10, memory_bytes=16 * 1024**2),
    )
    return pr.BundlePlan(bundle_id=bundle_id(i), workloads=(web,))


async def transport(adapter: KubernetesAdapter) -> KubeTransport:
    """The adapter's transport (its call and byte counters)."""
    return await adapter.session.connection.transport()


def adapter_config(kubeconfig: str, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "kubeconfig": kubeconfig,
        "trust_network_policy": True,
        "api_qps": args.qps,
        "api_burst": args.burst,
        "max_threads": args.threads,
        "schedule_wait": 120.0,
        "read_timeout": 120.0,
    }


# -- measuring -------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def rss_bytes(pid: int | str = "self", field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int | str = "self") -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def apiserver_requests(cluster: LocalCluster) -> Counter[str]:
    """``apiserver_request_total`` by ``VERB resource``, summed over codes and scopes."""
    status, text = cluster.rest.get("/metrics")
    assert status == HTTPStatus.OK, f"metrics: HTTP {status}"
    counts: Counter[str] = Counter()
    for match in _SAMPLE.finditer(text):
        labels = dict(_LABEL.findall(match["labels"]))
        resource = labels.get("resource") or "(non-resource)"
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        counts[f"{labels.get('verb')} {resource}"] += round(float(match["value"]))
    return counts


class Window:
    """API calls (adapter and API server), wall and CPU time of one phase."""

    def __init__(
        self, cluster: LocalCluster, adapter: KubernetesAdapter, pids: dict[str, int]
    ) -> None:
        self.cluster, self.adapter, self.pids = cluster, adapter, pids

    def __enter__(self) -> Self:
        self.server_before = apiserver_requests(self.cluster)
        self.calls_before = self.adapter.api_calls
        self.cpu_before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start
        self.cpu = {
            name: (cpu_seconds(pid) - self.cpu_before[name]) / self.seconds
            for name, pid in self.pids.items()
        }
        self.calls = self.adapter.api_calls - self.calls_before
        after = apiserver_requests(self.cluster)
        self.server = after - self.server_before
        self.server["GET (non-resource)"] -= 2  # our own two scrapes of /metrics

    def server_total(self) -> int:
        return sum(v for v in self.server.values() if v > 0)

    def server_top(self, count: int = 6) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.server.most_common(count) if v > 0)


async def each(
    indices: Sequence[int], concurrency: int, fn: Callable[[int], Awaitable[object]]
) -> tuple[float, list[float]]:
    """Run ``fn`` for every app index, ``concurrency`` at a time; wall time and latencies."""
    apps = len(indices)
    latencies: list[float] = []
    limiter = anyio.CapacityLimiter(concurrency)
    start = time.perf_counter()

    async def one(i: int) -> None:
        async with limiter:
            begun = time.perf_counter()
            await fn(i)
            latencies.append(time.perf_counter() - begun)
            if len(latencies) % max(1, apps // 10) == 0:  # progress, for whoever polls the log
                elapsed = time.perf_counter() - start
                print(f"  ... {len(latencies)}/{apps} in {elapsed:.0f} s", file=sys.stderr)

    async with anyio.create_task_group() as group:
        for i in indices:
            group.start_soon(one, i)
    return time.perf_counter() - start, latencies


async def observe_pass(adapter: KubernetesAdapter, apps: int) -> tuple[float, int]:
    """Seconds of one observe of every app, one after another; how many run."""
    from pando_runtime import BundleRef  # noqa: PLC0415

    refs = [BundleRef(bundle_id(i)) for i in range(apps)]
    start = time.perf_counter()
    running = 0
    for ref in refs:
        running += (await adapter.observe(ref)).all_running
    return time.perf_counter() - start, running


def run_child(*argv: str, timeout: float) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, str(CHILDREN), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"child {argv[0]} failed:\n{result.stderr[-3000:]}")
    answer: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


# -- one N -----------------------------------------------------------------------------------


async def event_latency(
    adapter: KubernetesAdapter, kubeconfig: str, apps: int, samples: int, rate: float
) -> tuple[dict[str, Any], list[int]]:
    """kwok phase change (seen by another process) to the BundleEvent; PATCH to the event."""
    from pando_runtime import BundleEventKind  # noqa: PLC0415

    step = max(1, apps // samples)
    chosen = list(range(0, apps, step))[:samples]
    cache = adapter.cache
    assert cache is not None, "a connected adapter has its cache"
    targets: list[str] = []
    for i in chosen:
        ns = f"pando-{bundle_id(i)}"
        pods = cache.pods.pods(ns)
        targets.append(f"{ns}/{pods[0].name}")
    received: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as work:
        targets_file, out_file = Path(work, "targets"), Path(work, "out")
        targets_file.write_text("\n".join(targets))  # noqa: ASYNC240 - a small local file
        out_file.touch()  # noqa: ASYNC240
        async with adapter.watch_bundles() as events:
            first = await anext(events)
            assert first.kind is BundleEventKind.WATCHING
            argv = [sys.executable, str(CHILDREN), "phases", kubeconfig]
            argv += [str(targets_file), str(out_file), str(rate)]
            process = subprocess.Popen(argv)  # noqa: ASYNC220 - a long-lived observer
            try:
                with anyio.fail_after(60 + samples / rate * 3):
                    async for event in events:
                        if event.kind is BundleEventKind.EXITED and event.bundle_id:
                            key = f"pando-{event.bundle_id}"
                            received.setdefault(key, time.monotonic())
                            if len(received) >= len(targets):
                                break
            finally:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=10)
                if process.poll() is None:
                    process.terminate()
                    process.wait(timeout=10)
        phase: dict[str, float] = {}
        patched: dict[str, float] = {}
        for line in out_file.read_text().splitlines():  # noqa: ASYNC240 - a small local file
            kind, *rest = line.split()
            if kind in ("phase", "patched"):
                (phase if kind == "phase" else patched)[rest[1].split("/")[0]] = float(rest[0])
    from_phase = [received[ns] - phase[ns] for ns in received if ns in phase]
    from_patch = [received[ns] - patched[ns] for ns in received if ns in patched]
    figures = {
        "samples": len(targets),
        "events": len(received),
        "p50": percentile(from_phase, 0.5),
        "p99": percentile(from_phase, 0.99),
        "max": max(from_phase, default=math.nan),
        "patch_p50": percentile(from_patch, 0.5),
        "patch_p99": percentile(from_patch, 0.99),
    }
    return figures, chosen


def cluster_nodes(apps: int) -> list[Any]:
    from localcluster import NodeSpec  # noqa: PLC0415

    count = max(2, math.ceil(apps * 1.1 / PODS_PER_NODE))
    return [
        NodeSpec(f"kwok-node-{i}", cpu="64", memory="256Gi", pods=PODS_PER_NODE)
        for i in range(count)
    ]


async def first_apply(
    cluster: LocalCluster,
    adapter: KubernetesAdapter,
    pids: dict[str, int],
    args: argparse.Namespace,
    r: dict[str, Any],
    *,
    first: int,
) -> None:
    """Apply apps ``first`` to N (the cluster holds the others already), then re-apply all."""
    apps = r["apps"]
    new = range(first, apps)

    async def apply(i: int) -> None:
        await adapter.apply(plan(i))

    profiler = cProfile.Profile() if args.profile else None
    with Window(cluster, adapter, pids) as w:
        if profiler is not None:
            profiler.enable()
        seconds, latencies = await each(new, args.concurrency, apply)
        if profiler is not None:
            profiler.disable()
    r["applied"] = len(new)
    r["apply_s"] = seconds
    r["apply_rate"] = len(new) / seconds
    r["apply_p50"] = percentile(latencies, 0.5)
    r["apply_p99"] = percentile(latencies, 0.99)
    r["apply_calls"] = w.calls / len(new)
    r["apply_server"] = w.server_total() / len(new)
    r["apply_server_top"] = w.server_top()
    r["apply_cpu"] = w.cpu
    r["calls_by_kind"] = dict(Counter((await transport(adapter)).calls_by_kind).most_common(12))
    if profiler is not None:
        for order in ("tottime", "cumulative"):
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(30)
            r[f"profile_{order}"] = text.getvalue()
    r["all_running_after_s"] = await until_running(adapter, apps)
    with Window(cluster, adapter, pids) as w:
        await each(range(apps), args.concurrency, apply)
    r["reapply_calls"] = w.calls / apps
    r["reapply_server"] = w.server_total() / apps
    r["reapply_s"] = w.seconds


async def until_running(adapter: KubernetesAdapter, apps: int) -> float:
    """Seconds until every app runs (observed as a host would, pass after pass)."""
    start = time.perf_counter()
    with anyio.fail_after(max(300, apps / 10)):
        while (await observe_pass(adapter, apps))[1] < apps:  # noqa: ASYNC110 - polls as hosts do
            await anyio.sleep(2)
    return time.perf_counter() - start


async def destroy_all(
    cluster: LocalCluster,
    adapter: KubernetesAdapter,
    pids: dict[str, int],
    args: argparse.Namespace,
    r: dict[str, Any],
) -> None:
    from pando_runtime import BundleRef  # noqa: PLC0415

    apps = r["apps"]

    async def destroy(i: int) -> None:
        await adapter.destroy(BundleRef(bundle_id(i)))

    with Window(cluster, adapter, pids) as w:
        seconds, latencies = await each(range(apps), args.concurrency, destroy)
    r["destroy_s"] = seconds
    r["destroy_rate"] = apps / seconds
    r["destroy_p50"] = percentile(latencies, 0.5)
    r["destroy_calls"] = w.calls / apps
    r["destroy_server"] = w.server_total() / apps
    r["destroy_server_top"] = w.server_top(4)


async def measure(cluster: LocalCluster, stages: list[int], args: argparse.Namespace) -> None:
    """Grow one cluster through ``stages`` (app counts), measuring at each; destroy at the end."""
    from pando_runtime_kubernetes import KubernetesAdapter  # noqa: PLC0415

    kubeconfig = str(cluster.kubeconfig)
    pids = {name: c.pid for name, c in cluster.components.items() if c.pid}
    pids["adapter (benchmark process)"] = os.getpid()
    results: list[dict[str, Any]] = []
    async with KubernetesAdapter(adapter_config(kubeconfig, args)) as adapter:
        cache = adapter.cache
        assert cache is not None, "a connected adapter has its cache"
        assert await cache.wait_synced(60), "the cache syncs"
        rss_start = rss_bytes()
        first = 0
        for apps in stages:
            r: dict[str, Any] = {"apps": apps, "nodes": len(cluster.nodes)}
            await first_apply(cluster, adapter, pids, args, r, first=first)
            first = apps
            r["rss_growth_main"] = rss_bytes() - rss_start
            with Window(cluster, adapter, pids) as w:
                passes = [(await observe_pass(adapter, apps))[0] for _ in range(3)]
            r["observe_calls"] = w.calls / apps / 3
            r["observe_server"] = w.server_total() / apps / 3
            r["observe_server_top"] = w.server_top(3)
            r["observe_pass_s"] = statistics.median(passes)
            r["observe_first_pass_s"] = passes[0]
            # Children run from a worker thread: this adapter's watches keep being read.
            r["cold"] = await anyio.to_thread.run_sync(
                functools.partial(
                    run_child, "cold", kubeconfig, str(apps), *forwarded(args), timeout=1800
                )
            )
            r["naive"] = await anyio.to_thread.run_sync(
                functools.partial(
                    run_child,
                    "naive",
                    kubeconfig,
                    str(apps),
                    str(args.naive_seconds),
                    timeout=1800,
                )
            )
            r["events"], ended = await event_latency(
                adapter, kubeconfig, apps, min(args.event_samples, apps), args.event_rate
            )
            # The ended apps run again before the next stage (outside every measured window).
            await each(ended, args.concurrency, lambda i: adapter.apply(plan(i)))
            await until_running(adapter, apps)
            if apps == stages[-1]:
                await destroy_all(cluster, adapter, pids, args, r)
            if results:
                # A fresh process's growth per app between two counts: the cost each further
                # app adds, without what every process pays once (pages of its first lists).
                previous = results[-1]
                grown = r["cold"]["rss_growth"] - previous["cold"]["rss_growth"]
                r["rss_growth_slope"] = grown / (apps - previous["apps"])
            report(r, args)
            results.append(r)
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=2, default=str))  # noqa: ASYNC240


def forwarded(args: argparse.Namespace) -> list[str]:
    return [
        f"--qps={args.qps}",
        f"--burst={args.burst}",
        f"--threads={args.threads}",
    ]


# -- report ----------------------------------------------------------------------------------


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    n = r["apps"]
    cold, naive, ev, cache = r["cold"], r["naive"], r["events"], r["cold"]["cache_bytes"]
    naive_pass = naive["seconds"] / max(1, naive["apps"]) * n
    adapter_rate = n / r["observe_pass_s"]
    naive_rate = naive["apps"] / naive["seconds"]
    cpu = sorted(r["apply_cpu"].items(), key=lambda item: -item[1])
    extrapolated = "" if naive["apps"] == n else ", pass extrapolated"

    def out(text: str) -> None:
        print(text, flush=True)

    out(
        f"== {n:,} one-workload apps on {r['nodes']} kwok nodes (adapter qps {args.qps:g}, "
        f"burst {args.burst}, {args.threads} threads; {args.concurrency} concurrent applies)"
    )
    out(
        f"first apply:   {r['apply_rate']:.1f} apps/s ({r['applied']:,} new apps in "
        f"{r['apply_s']:.1f} s), latency p50 "
        f"{r['apply_p50'] * 1000:.0f} ms, p99 {r['apply_p99'] * 1000:.0f} ms; all running "
        f"{r['all_running_after_s']:.1f} s later"
    )
    out(
        f"  API calls per app: adapter {r['apply_calls']:.2f}, API server (every client) "
        f"{r['apply_server']:.2f} ({r['apply_server_top']})"
    )
    out("  CPU during the apply (cores): " + ", ".join(f"{k} {v:.2f}" for k, v in cpu))
    out(
        f"re-apply:      adapter {r['reapply_calls']:.2f} calls per app, API server "
        f"{r['reapply_server']:.2f} per app ({r['reapply_s']:.1f} s for all)"
    )
    out(
        f"observe:       adapter {r['observe_calls']:.2f} calls per app, API server "
        f"{r['observe_server']:.3f} per app in the window ({r['observe_server_top'] or 'none'}); "
        f"a pass over all {n:,}: {r['observe_pass_s'] * 1000:.1f} ms "
        f"({adapter_rate:,.0f} observes/s; the first pass after the apply "
        f"{r['observe_first_pass_s'] * 1000:.1f} ms)"
    )
    out(
        f"cold start:    {cold['cold_start_s']:.2f} s to the first answered observe, "
        f"{cold['cold_calls']} API calls, {cold['cold_bytes'] / 2**20:.1f} MiB received; "
        f"observe pass there {cold['observe_pass_s'] * 1000:.1f} ms"
    )
    out(
        f"memory:        adapter process RSS growth {cold['rss_growth'] / n:,.0f} bytes per app "
        f"({cold['rss_growth'] / 2**20:.1f} MiB for {n:,}; the official client's import "
        f"{cold['rss_client_import'] / 2**20:.1f} MiB apart); cache {cache['pods']:.0f} bytes per "
        f"pod (its JSON {cache['pods_json_bytes']:,.0f}), {cache['namespaces']:.0f} per "
        f"namespace, {cache['services']:.0f} per Service; benchmark process grew "
        f"{r['rss_growth_main'] / n:,.0f} bytes per app"
        + (
            f"; a fresh process's growth per further app since the previous count "
            f"{r['rss_growth_slope']:,.0f} bytes"
            if "rss_growth_slope" in r
            else ""
        )
    )
    out(
        f"capacity:      capacity + largest_fit_for in one read scope "
        f"{cold['capacity_s'] * 1000:.0f} ms, {cold['capacity_calls']} API calls "
        f"({cold['capacity_nodes']} nodes, fit {cold['fit']}); capacity alone "
        f"{cold['capacity_unscoped_s'] * 1000:.0f} ms"
    )
    out(
        f"events:        kwok phase change -> BundleEvent p50 {ev['p50'] * 1000:.0f} ms, p99 "
        f"{ev['p99'] * 1000:.0f} ms, max {ev['max'] * 1000:.0f} ms ({ev['events']}/"
        f"{ev['samples']} pods, {args.event_rate:g} per s); annotation PATCH -> event p50 "
        f"{ev['patch_p50'] * 1000:.0f} ms, p99 {ev['patch_p99'] * 1000:.0f} ms"
    )
    if "destroy_s" in r:
        out(
            f"destroy:       {r['destroy_rate']:.1f} apps/s ({r['destroy_s']:.1f} s), adapter "
            f"{r['destroy_calls']:.2f} calls per app, API server {r['destroy_server']:.2f} per "
            f"app ({r['destroy_server_top']})"
        )
    out(
        f"naive:         official client, 4 typed reads per app per observe: "
        f"{naive_rate:,.1f} observes/s ({naive['apps']:,} apps in {naive['seconds']:.1f} s"
        f"{extrapolated}); a pass over all {n:,}: {naive_pass:.1f} s; RSS "
        f"{naive['rss'] / 2**20:.0f} MiB (peak {naive['rss_peak'] / 2**20:.0f} MiB) vs the "
        f"adapter's {cold['rss_after'] / 2**20:.0f} MiB"
    )
    out(f"ratio:         adapter observe rate / naive = {adapter_rate / naive_rate:,.0f}x")
    if "profile_tottime" in r:
        out("profile of the first apply (event-loop thread), by own time:")
        out(r["profile_tottime"])
        out("by cumulative time:")
        out(r["profile_cumulative"])


def run_stages(stages: list[int], args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localcluster import LocalCluster  # noqa: PLC0415

    start = time.perf_counter()
    with LocalCluster(nodes=cluster_nodes(stages[-1]), start_timeout=300) as cluster:
        print(f"(control plane up in {time.perf_counter() - start:.0f} s)", flush=True)
        anyio.run(measure, cluster, stages, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--apps",
        type=int,
        nargs="+",
        default=[1000, 5000, 10000],
        help="app counts: one cluster grows through them, measured at each",
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--qps", type=float, default=1000.0)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--naive-seconds", type=float, default=60.0)
    parser.add_argument("--event-samples", type=int, default=300)
    parser.add_argument("--event-rate", type=float, default=25.0)
    parser.add_argument("--profile", action="store_true", help="cProfile the first apply")
    parser.add_argument("--json", help="also write every figure to this file")
    args = parser.parse_args()
    run_stages(sorted(args.apps), args)


if __name__ == "__main__":
    main()
