"""Benchmark: apps on a real node (containerd, runc, kubelet), not kwok's simulated ones.

    python adapters/kubernetes/benchmarks/kube_real_node.py [--apps 20] [--batch 60]
        [--idle 10] [--steady 10] [--cpu-millis N] [--memory-mib N]

It starts a local control plane with a real node beside kwok's (``LocalCluster(real_node=True)``:
containerd, runc, kubelet, kube-proxy, kube-router and CoreDNS in the harness's network
namespaces) and drives the adapter with the admin kubeconfig (``system:masters``, as
``kube_apps.py`` does; no per-app RoleBinding), its apps placed on the real node by the
RuntimeClass ``pando-real``. Each app is one workload of the harness's busybox image (loaded
on the node, so nothing is pulled) running ``sleep`` behind a TERM trap (so a destroy does not
wait out the grace period). Prints:

- the node's start: from ``LocalCluster.start()`` to the node Ready, and from Ready to a first
  app's pod running (the cluster's and the node's own timings);
- apply to running for ``--apps`` apps applied one at a time, then all at once, then for
  ``--batch`` apps at once: per app the seconds from ``apply`` to ``observe`` saying running,
  and to the container's start as containerd's CRI records it (what kubelet reports as
  ``startedAt``, to the nanosecond here); p50, p99 and max, and pods started per second;
- the adapter's API calls per first apply, re-apply, observe and destroy (one at a time, so
  each apply's calls are its own);
- CPU (user+sys seconds from ``/proc/<pid>/stat``, and those of the children each reaped:
  iptables, CNI plugins, runc) and memory (RSS) of each node component and of the control plane
  beside it, idle, during each phase and with the batch running, and how busy the machine's
  cores were.

Workloads set no resources unless ``--cpu-millis``/``--memory-mib`` say so (the adapter makes
the limit equal to the request). A CPU limit throttles the start itself: runc's init and the
sandbox's run inside the pod's CPU quota, so 10m makes a start take seconds.

Needs root and what ``localcluster.realnode.setup.missing()`` checks; where the machine lacks
any of it, prints one line saying so and exits 0. Prints figures; asserts only that the run did
what it says (every app running).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import MANAGED_SELECTOR, namespace_for

from pando_runtime import BundlePlan, BundleRef, Resources, WorkloadPlan

if TYPE_CHECKING:  # the test support packages join the path in main()
    from localcluster import LocalCluster
    from localcluster.realnode.stack import RealNode

ROOT = Path(__file__).resolve().parents[3]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
POLL = 0.02
"""Seconds between two observes of an app not yet running (observe reads the cache)."""
MAX_APPS = 109
"""The node's ``maxPods`` (110) less CoreDNS: the apps of one phase must fit."""
RUNNING_WAIT = 180.0
GONE_WAIT = 120.0
SHIM = "containerd-shim"
"""``comm`` of ``containerd-shim-runc-v2`` (the kernel keeps 15 characters)."""
SCRIPT = "trap 'exit 0' TERM; sleep 3600 & wait"
"""The workload: ``sleep``, under a shell that ends at once on TERM."""
NODE_GROUPS = ("containerd", "shims", "kubelet", "kube-proxy", "kube-router", "relay", "coredns")
PLANE_GROUPS = (
    "kube-apiserver",
    "etcd",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "metrics-server",
    "registry",
    "benchmark",
)
"""The control plane on the same cores, and this process (the adapter and the polling)."""


# -- processes -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcSample:
    """One process at one instant: CPU ticks (own, reaped children) and memory (KiB)."""

    own: int
    children: int
    rss_kib: int


def proc_sample(pid: int) -> ProcSample | None:
    """``/proc/<pid>/stat`` (utime+stime, cutime+cstime) and ``VmRSS``; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    rss = 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    # fields[0] is field 3 (state): utime 14, stime 15, cutime 16, cstime 17.
    own = int(fields[11]) + int(fields[12])
    children = int(fields[13]) + int(fields[14])
    return ProcSample(own, children, rss)


def pss_kib(pid: int) -> int:
    """Proportional set size (shared pages divided among their users), 0 once gone."""
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def shim_pids(socket: Path) -> list[int]:
    """The ``containerd-shim-runc-v2`` processes of this node's containerd (its socket)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != SHIM:
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError):
            continue
        if str(socket).encode() in argv:
            found.append(int(entry.name))
    return found


def machine_ticks() -> tuple[int, int]:
    """All cores' (busy, total) ticks since boot, from ``/proc/stat``: busy is user, nice,
    system, irq and softirq time (not idle, iowait or steal); guest time is in user time."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, _steal = values[:8]
    return user + nice + system + irq + softirq, sum(values[:8])


def real_node(cluster: LocalCluster) -> RealNode:
    """The cluster's real node (started with ``real_node=True``)."""
    if cluster.real_node is None:
        raise RuntimeError("the cluster runs no real node")
    return cluster.real_node


def running(pid: int | None) -> list[int]:
    """``[pid]`` of a running process, none of one that is not."""
    return [pid] if pid else []


class Processes:
    """The pids of each component group, resolved at each sample (shims come and go)."""

    def __init__(self, cluster: LocalCluster, coredns_pid: int | None) -> None:
        node = real_node(cluster)
        self._socket = node.dirs.containerd_socket
        fixed: dict[str, list[int]] = {}
        for name in ("containerd", "kubelet", "kube-proxy", "kube-router"):
            fixed[name] = running(node.components[name].pid)
        nodes = cluster.real_node_set
        relay = nodes.relay if nodes is not None else None
        fixed["relay"] = running(relay.pid if relay is not None else None)
        fixed["coredns"] = running(coredns_pid)
        for name in PLANE_GROUPS[:-2]:
            fixed[name] = running(cluster.components[name].pid)
        registry = getattr(cluster.registry, "_component", None)
        fixed["registry"] = [registry.pid] if registry is not None and registry.pid else []
        fixed["benchmark"] = [os.getpid()]
        self._fixed = fixed

    def groups(self) -> dict[str, list[int]]:
        return {**self._fixed, "shims": shim_pids(self._socket)}

    def sample(self) -> dict[str, dict[int, ProcSample]]:
        taken: dict[str, dict[int, ProcSample]] = {}
        for group, pids in self.groups().items():
            taken[group] = {p: s for p in pids if (s := proc_sample(p)) is not None}
        return taken


@dataclass
class Usage:
    """What one group used over a window."""

    own_s: float
    children_s: float
    rss_kib: int
    """The most the group held at once (summed over its processes) at a sample."""
    count: int
    """Processes in the group at the window's end."""
    pss_kib: int = 0


@dataclass
class Window:
    """CPU and memory of every group over one phase."""

    name: str
    seconds: float = 0.0
    usage: dict[str, Usage] = field(default_factory=dict)
    machine_busy: float = 0.0
    """Cores busy on average (every process of the machine)."""


class Meter:
    """Samples the groups at a window's start and end, and their memory every half second."""

    def __init__(self, procs: Processes) -> None:
        self.procs = procs
        self.windows: list[Window] = []

    @contextlib.asynccontextmanager
    async def window(self, name: str) -> AsyncIterator[None]:
        start = self.procs.sample()
        busy0, total0 = machine_ticks()
        t0 = time.monotonic()
        peak: Counter[str] = Counter()

        def note(sample: dict[str, dict[int, ProcSample]]) -> None:
            for group, procs in sample.items():
                peak[group] = max(peak[group], sum(s.rss_kib for s in procs.values()))

        async def sampler() -> None:
            while True:
                await anyio.sleep(0.5)
                note(await anyio.to_thread.run_sync(self.procs.sample))

        note(start)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(sampler)
            yield
            tasks.cancel_scope.cancel()
        end = self.procs.sample()
        note(end)
        seconds = time.monotonic() - t0
        busy1, total1 = machine_ticks()
        w = Window(name, seconds, machine_busy=(busy1 - busy0) / max(1, total1 - total0))
        w.machine_busy *= os.cpu_count() or 1
        for group, procs in end.items():
            before = start.get(group, {})
            zero = ProcSample(0, 0, 0)
            own = sum(s.own - before.get(p, zero).own for p, s in procs.items())
            kids = sum(s.children - before.get(p, zero).children for p, s in procs.items())
            pss = sum(pss_kib(p) for p in procs) if group == "shims" else 0
            w.usage[group] = Usage(
                own / CLOCK_TICKS, kids / CLOCK_TICKS, peak[group], len(procs), pss
            )
        self.windows.append(w)
        progress(f"{name}: {seconds:.1f} s")


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


# -- the cluster's side: pods, containerd's records --------------------------------------------


def cri_status(cluster: LocalCluster, container_id: str) -> dict[str, Any]:
    """containerd's CRI record of a container (``Pid``, ``CreatedAt``, ``StartedAt`` in ns)."""
    root = real_node(cluster).dirs.containerd / "root" / "io.containerd.grpc.v1.cri"
    text = (root / "containers" / container_id / "status").read_text()
    record: dict[str, Any] = json.loads(text)
    return record


def container_ids(cluster: LocalCluster, path: str) -> dict[str, str]:
    """``namespace -> containerd id`` of the first container of each pod at ``path``."""
    status, body = cluster.rest.get(path)
    assert status == HTTPStatus.OK, f"GET {path}: {status} {body}"
    found = {}
    for pod in body["items"]:
        statuses = pod.get("status", {}).get("containerStatuses") or []
        if statuses and statuses[0].get("containerID"):
            found[pod["metadata"]["namespace"]] = statuses[0]["containerID"].split("://", 1)[1]
    return found


def coredns_pid(cluster: LocalCluster) -> int | None:
    ids = container_ids(
        cluster, "/api/v1/namespaces/kube-system/pods?labelSelector=k8s-app%3Dkube-dns"
    )
    if not ids:
        return None
    pid = cri_status(cluster, next(iter(ids.values()))).get("Pid")
    return int(pid) if pid else None


def app_pods_left(cluster: LocalCluster) -> int:
    """App pods not yet gone (the node has not yet stopped their containers)."""
    path = f"/api/v1/pods?labelSelector={MANAGED_SELECTOR}"
    status, body = cluster.rest.get(path)
    assert status == HTTPStatus.OK, f"GET {path}: {status}"
    return len(body["items"])


# -- apps ------------------------------------------------------------------------------------


def plan(bundle_id: str, image: str, resources: Resources) -> BundlePlan:
    main = WorkloadPlan(
        name="main", image=image, entrypoint=("sh", "-c", SCRIPT), resources=resources
    )
    return BundlePlan(bundle_id=bundle_id, workloads=(main,))


@dataclass
class AppTiming:
    """One app's way to running, in seconds from the start of its ``apply``."""

    bundle_id: str
    started: float = 0.0
    started_wall_ns: int = 0
    applied: float | None = None
    running: float | None = None
    """To the first ``observe`` saying every workload runs."""
    container: float | None = None
    """To containerd's ``StartedAt`` of its container."""
    calls: int = 0
    kinds: Counter[str] = field(default_factory=Counter)


@dataclass
class Phase:
    name: str
    timings: list[AppTiming]
    seconds: float = 0.0
    """From the first apply's start to the last app observed running."""
    calls: int = 0
    observe_calls: int = 0
    at_once: bool = False

    def values(self, what: str) -> list[float]:
        found = [getattr(t, what) for t in self.timings]
        return [v for v in found if v is not None]


class Bench:
    def __init__(
        self, cluster: LocalCluster, adapter: KubernetesAdapter, image: str, resources: Resources
    ) -> None:
        self.cluster = cluster
        self.adapter = adapter
        self.image = image
        self.resources = resources

    def plan(self, bundle_id: str) -> BundlePlan:
        return plan(bundle_id, self.image, self.resources)

    async def apply(self, t: AppTiming) -> None:
        t.started = time.monotonic()
        t.started_wall_ns = time.time_ns()
        await self.adapter.apply(self.plan(t.bundle_id))
        t.applied = time.monotonic() - t.started

    async def until_running(self, timings: list[AppTiming]) -> int:
        """Observe each applied app until it runs; returns the API calls the observes made."""
        calls = 0
        with anyio.fail_after(RUNNING_WAIT):
            while waiting := [t for t in timings if t.running is None]:
                for t in waiting:
                    if t.applied is None:
                        continue  # observed once its apply returned, as a host would
                    before = self.adapter.api_calls
                    observed = await self.adapter.observe(BundleRef(t.bundle_id))
                    calls += self.adapter.api_calls - before
                    if observed.all_running:
                        t.running = time.monotonic() - t.started
                await anyio.sleep(POLL)
        return calls

    def read_container_starts(self, timings: list[AppTiming]) -> None:
        ids = container_ids(self.cluster, f"/api/v1/pods?labelSelector={MANAGED_SELECTOR}")
        for t in timings:
            cid = ids.get(namespace_for(t.bundle_id))
            if cid is not None:
                started = cri_status(self.cluster, cid)["StartedAt"]
                t.container = (started - t.started_wall_ns) / 1e9

    async def one_at_a_time(self, name: str, ids: list[str]) -> Phase:
        """Each app applied once the one before runs; each apply's API calls are its own."""
        phase = Phase(name, [AppTiming(b) for b in ids])
        t0 = time.monotonic()
        for t in phase.timings:
            calls = self.adapter.api_calls
            kinds = Counter(self.adapter.session.connection.calls_by_kind)
            await self.apply(t)
            t.calls = self.adapter.api_calls - calls
            t.kinds = Counter(self.adapter.session.connection.calls_by_kind) - kinds
            phase.observe_calls += await self.until_running([t])
        phase.seconds = time.monotonic() - t0
        phase.calls = sum(t.calls for t in phase.timings)
        await anyio.to_thread.run_sync(self.read_container_starts, phase.timings)
        return phase

    async def at_once(self, name: str, ids: list[str]) -> Phase:
        """Every app applied at the same time (a task each), observed while they start."""
        phase = Phase(name, [AppTiming(b) for b in ids], at_once=True)
        calls = self.adapter.api_calls
        t0 = time.monotonic()

        async def watch() -> None:
            phase.observe_calls = await self.until_running(phase.timings)

        async with anyio.create_task_group() as group:
            for t in phase.timings:
                group.start_soon(self.apply, t)
            group.start_soon(watch)
        phase.seconds = time.monotonic() - t0
        phase.calls = self.adapter.api_calls - calls - phase.observe_calls
        await anyio.to_thread.run_sync(self.read_container_starts, phase.timings)
        return phase

    async def reapply(self, ids: list[str]) -> tuple[float, float]:
        """API calls per re-apply of an unchanged plan, one at a time; and per observe."""
        calls = self.adapter.api_calls
        for b in ids:
            await self.adapter.apply(self.plan(b))
        reapply = (self.adapter.api_calls - calls) / len(ids)
        calls = self.adapter.api_calls
        for b in ids:
            await self.adapter.observe(BundleRef(b))
        return reapply, (self.adapter.api_calls - calls) / len(ids)

    async def destroy(self, ids: list[str]) -> tuple[float, float]:
        """Destroy the apps at once; API calls per destroy, and seconds until their pods are
        gone (the node stopped their containers; the namespaces go on being deleted)."""
        calls = self.adapter.api_calls
        t0 = time.monotonic()
        async with anyio.create_task_group() as group:
            for b in ids:
                group.start_soon(self.adapter.destroy, BundleRef(b))
        per_app = (self.adapter.api_calls - calls) / len(ids)
        with anyio.fail_after(GONE_WAIT):
            while await anyio.to_thread.run_sync(app_pods_left, self.cluster):  # noqa: ASYNC110 - polls the cluster
                await anyio.sleep(0.25)
        seconds = time.monotonic() - t0
        progress(f"{len(ids)} destroyed, their pods gone: {seconds:.1f} s")
        return per_app, seconds


# -- the run ---------------------------------------------------------------------------------


def adapter_settings(cluster: LocalCluster) -> dict[str, Any]:
    """The real-node tests' settings (``real_adapter_config``) where an admin runs the adapter:
    the admin kubeconfig, NetworkPolicy trusted (kube-router enforces it; the tests check),
    the client's rate limit out of the way (as ``kube_apps.py``)."""
    from localcluster.realnode import addons, network  # noqa: PLC0415

    return {
        "kubeconfig": str(cluster.kubeconfig),
        "runtime_class": addons.RUNTIME_CLASS,
        "trust_network_policy": True,
        "pod_cidr": network.POD_CIDR,
        "service_cidr": "10.96.0.0/16",
        "api_server_cidr": f"{network.API_SERVER_IP}/32",
        "node_cidr": network.LINK_CIDR,
        "dns_namespace": addons.DNS_NAMESPACE,
        "dns_labels": dict(addons.DNS_LABELS),
        "api_qps": 1000.0,
        "api_burst": 200,
        "schedule_wait": 60.0,
    }


@dataclass
class Report:
    started_at: dt.datetime
    load_before: tuple[float, float, float]
    resources: Resources
    start_s: float = 0.0
    cluster_timings: dict[str, float] = field(default_factory=dict)
    node_timings: dict[str, float] = field(default_factory=dict)
    connect_s: float = 0.0
    """From ``start()`` returning to the adapter connected (its cache synced)."""
    first: AppTiming = field(default_factory=lambda: AppTiming("-"))
    phases: list[Phase] = field(default_factory=list)
    reapply_calls: float = 0.0
    observe_calls: float = 0.0
    destroy_calls: float = 0.0
    destroys: list[tuple[int, float]] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    total_s: float = 0.0


async def measure(cluster: LocalCluster, args: argparse.Namespace, r: Report) -> None:
    from localcluster import images  # noqa: PLC0415

    returned = time.monotonic()
    async with KubernetesAdapter(adapter_settings(cluster)) as adapter:
        assert adapter.cache is not None
        await adapter.cache.wait_synced(30)
        r.connect_s = time.monotonic() - returned
        bench = Bench(cluster, adapter, images.WORKLOAD, r.resources)
        r.first = (await bench.one_at_a_time("first", ["rn-first"])).timings[0]
        meter = Meter(Processes(cluster, coredns_pid(cluster)))
        await bench.destroy(["rn-first"])

        async with meter.window(f"idle {args.idle:g} s"):
            await anyio.sleep(args.idle)

        seq = [f"rn-seq-{i:03d}" for i in range(args.apps)]
        async with meter.window(f"{args.apps} one at a time"):
            r.phases.append(await bench.one_at_a_time(f"{args.apps} one at a time", seq))
        r.reapply_calls, r.observe_calls = await bench.reapply(seq)
        r.destroy_calls, seconds = await bench.destroy(seq)
        r.destroys.append((len(seq), seconds))

        once = [f"rn-once-{i:03d}" for i in range(args.apps)]
        async with meter.window(f"{args.apps} at once"):
            r.phases.append(await bench.at_once(f"{args.apps} at once", once))
        _, seconds = await bench.destroy(once)
        r.destroys.append((len(once), seconds))

        if args.batch:
            batch = [f"rn-batch-{i:03d}" for i in range(args.batch)]
            async with meter.window(f"{args.batch} at once"):
                r.phases.append(await bench.at_once(f"{args.batch} at once", batch))
            if args.steady:
                async with meter.window(f"{args.batch} running, {args.steady:g} s"):
                    await anyio.sleep(args.steady)
            # Left running: stopping the node ends them.
        r.windows = meter.windows


# -- report ----------------------------------------------------------------------------------


def out(text: str = "") -> None:
    print(text, flush=True)


def quantile(values: list[float], q: float) -> float:
    """Linear interpolation between the nearest ranks (p99 of 20 lies near the max)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    pos = q * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def machine() -> str:
    memory = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            memory = int(line.split()[1]) * 1024
    return (
        f"{os.cpu_count()} cores (nproc), {memory / 2**30:.1f} GiB memory, "
        f"kernel {platform.release()}"
    )


def describe(resources: Resources) -> str:
    parts = []
    if resources.cpu_millis is not None:
        parts.append(f"{resources.cpu_millis}m CPU")
    if resources.memory_bytes is not None:
        parts.append(f"{resources.memory_bytes / 2**20:g} MiB")
    return (", ".join(parts) + " (limit = request)") if parts else "no resources set"


def report_start(r: Report) -> None:
    c, n = r.cluster_timings, r.node_timings
    # The node's own timings count from RealNode.start(), which ends where the cluster's
    # "real node ready" is taken: it began at "real node ready" less the node's "total".
    node_t0 = c["real node ready"] - n["total"]
    ready = node_t0 + n["node ready"]
    out(
        f"start:     LocalCluster.start() {r.start_s:.1f} s. Control plane: apiserver ready "
        f"{c['apiserver ready']:.1f} s, kwok nodes ready {c['nodes ready']:.1f} s, metrics API "
        f"{c['metrics API available']:.1f} s; the real node's programs started at "
        f"{node_t0:.1f} s: containerd up +{n['containerd up']:.2f}, images loaded "
        f"+{n['images loaded']:.2f}, node registered +{n['node registered']:.2f}, Ready "
        f"+{n['node ready']:.2f} (= {ready:.1f} s after start() began), CoreDNS Ready "
        f"+{n['cluster DNS ready']:.2f}"
    )
    first = r.first
    running = first.running or math.nan
    waited = r.start_s - ready
    out(
        f"first pod: node Ready -> a first app observed running "
        f"{waited + r.connect_s + running:.1f} s: CoreDNS Ready and start() returning "
        f"{waited:.1f} s, adapter connected "
        f"{r.connect_s:.2f} s, apply -> running {running:.2f} s (its container started "
        f"{first.container or math.nan:.2f} s after the apply); from start() to it "
        f"{r.start_s + r.connect_s + running:.1f} s"
    )


def latency_row(label: str, values: list[float], rate: str) -> list[str]:
    return [
        label,
        f"{quantile(values, 0.5):.2f}",
        f"{quantile(values, 0.99):.2f}",
        f"{max(values):.2f}",
        f"{statistics.fmean(values):.2f}",
        rate,
    ]


def report_latency(r: Report) -> None:
    rows = [["apply -> (s)", "p50", "p99", "max", "mean", "pods/s"]]
    for p in r.phases:
        running, started = p.values("running"), p.values("container")
        rate = f"{len(running) / p.seconds:.1f}"
        if p.at_once:
            rows.append(latency_row(f"{p.name}: observe says running", running, rate))
            rate = f"{len(started) / max(started):.1f}"
            rows.append(latency_row(f"{p.name}: container started", started, rate))
        else:
            rows.append(latency_row(f"{p.name}: apply returned", p.values("applied"), ""))
            rows.append(latency_row(f"{p.name}: container started", started, ""))
            rows.append(latency_row(f"{p.name}: observe says running", running, rate))
    out(table(rows))
    out(
        "(container started: containerd's CRI StartedAt, which kubelet reports as startedAt; "
        "pods/s: apps over the seconds from the first apply to the last app observed running, "
        "or to the last container started)"
    )


def report_calls(r: Report) -> None:
    seq = next(p for p in r.phases if not p.at_once)
    apps = len(seq.timings)
    kinds = sum((t.kinds for t in seq.timings), Counter[str]())
    per_kind = ", ".join(f"{k} {v / apps:g}" for k, v in sorted(kinds.items()))
    out(
        f"API calls: first apply {seq.calls / apps:.2f} per app ({per_kind}); re-apply "
        f"{r.reapply_calls:.2f}; observe {r.observe_calls:.2f} (the polls until running made "
        f"{seq.observe_calls}); destroy {r.destroy_calls:.2f}"
    )
    for p in r.phases:
        if p.at_once:
            out(
                f"           {p.name}: {p.calls / len(p.timings):.2f} per first apply; the "
                f"polls until running made {p.observe_calls}"
            )
    gone = "; ".join(f"{apps} apps in {s:.1f} s" for apps, s in r.destroys)
    out(f"destroy:   all at once, until their pods are gone: {gone}")


def cpu_cell(w: Window, groups: tuple[str, ...]) -> str:
    own = sum(w.usage[g].own_s for g in groups)
    kids = sum(w.usage[g].children_s for g in groups)
    return f"{(own + kids) / w.seconds * 100:.0f}% ({own:.2f} + {kids:.2f})"


def report_cpu(r: Report) -> None:
    rows = [
        ["CPU: % of one core (own + children s)", *(w.name for w in r.windows)],
        ["window (s)", *(f"{w.seconds:.1f}" for w in r.windows)],
    ]
    rows += [[g, *(cpu_cell(w, (g,)) for w in r.windows)] for g in NODE_GROUPS]
    rows.append(["node, all", *(cpu_cell(w, NODE_GROUPS) for w in r.windows)])
    rows += [[g, *(cpu_cell(w, (g,)) for w in r.windows)] for g in PLANE_GROUPS]
    rows.append(["control plane, all", *(cpu_cell(w, PLANE_GROUPS[:-1]) for w in r.windows)])
    rows.append(["machine: cores busy", *(f"{w.machine_busy:.2f}" for w in r.windows)])
    out(table(rows))


def report_memory(r: Report) -> None:
    rows = [["RSS, the most at once (MiB)", *(w.name for w in r.windows)]]
    for group in (*NODE_GROUPS, "node, all", *PLANE_GROUPS):
        cells = [group]
        for w in r.windows:
            members = NODE_GROUPS if group == "node, all" else (group,)
            cell = f"{sum(w.usage[g].rss_kib for g in members) / 1024:.0f}"
            if group == "shims":
                u = w.usage[group]
                cell += f" ({u.count}, PSS {u.pss_kib / 1024:.0f})"
            cells.append(cell)
        rows.append(cells)
    out(table(rows))
    out(
        "(children: CPU of the processes each one reaped, such as iptables and ipset for "
        "kube-router and kube-proxy, CNI plugins for containerd, runc for the shims; shims: "
        "one per pod, summed, with their count; RSS counts shared pages in every shim, PSS "
        "divides them; benchmark: this process, the adapter and the polls)"
    )


def report(r: Report) -> None:
    stamp = r.started_at.strftime("%Y-%m-%d %H:%M UTC")
    load = ", ".join(f"{v:.2f}" for v in r.load_before)
    out(f"== real node, {stamp}; {machine()}; load average {load} before the start")
    out(
        "adapter: admin kubeconfig (system:masters), runtime_class pando-real, qps 1000, burst "
        f"200; one workload per app: busybox `sleep` behind a TERM trap, {describe(r.resources)}"
    )
    out()
    report_start(r)
    out()
    report_latency(r)
    out()
    report_calls(r)
    out()
    report_cpu(r)
    out()
    report_memory(r)
    out(f"\ntotal {r.total_s:.0f} s")


def skip_reason() -> str | None:
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localcluster.realnode.setup import missing  # noqa: PLC0415

    absent = missing()
    return ", ".join(absent) if absent else None


def run(args: argparse.Namespace) -> None:
    from localcluster import LocalCluster  # noqa: PLC0415

    memory = None if args.memory_mib is None else args.memory_mib * 2**20
    resources = Resources(cpu_millis=args.cpu_millis, memory_bytes=memory)
    r = Report(dt.datetime.now(dt.UTC), os.getloadavg(), resources)
    t0 = time.monotonic()
    cluster = LocalCluster(name="bench-real", real_node=True)
    cluster.start()
    try:
        r.start_s = time.monotonic() - t0
        r.cluster_timings = dict(cluster.timings)
        assert cluster.real_node is not None
        assert cluster.real_node_set is not None
        r.node_timings = {**cluster.real_node.timings, **cluster.real_node_set.timings}
        out(f"(cluster with a real node up in {r.start_s:.1f} s)")
        anyio.run(measure, cluster, args, r)
    finally:
        stopping = time.monotonic()
        cluster.stop()
        progress(f"cluster stopped: {time.monotonic() - stopping:.1f} s")
    r.total_s = time.monotonic() - t0
    report(r)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--apps", type=int, default=20, help="apps of the first two phases")
    parser.add_argument("--batch", type=int, default=60, help="apps at once after (0: none)")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of the idle window")
    parser.add_argument(
        "--steady", type=float, default=10.0, help="seconds of a window with the batch running"
    )
    parser.add_argument("--cpu-millis", type=int, help="each workload's CPU (unset: none)")
    parser.add_argument("--memory-mib", type=int, help="each workload's memory (unset: none)")
    args = parser.parse_args()
    if max(args.apps, args.batch) > MAX_APPS:
        parser.error(f"the node holds {MAX_APPS + 1} pods, CoreDNS among them")
    reason = skip_reason()
    if reason is not None:
        out(f"kube_real_node: skipped, this machine cannot run a real node: it lacks {reason}")
        return
    run(args)


if __name__ == "__main__":
    main()
