"""Benchmark: several host replicas on the local control plane (issue 23's figures).

    python adapters/kubernetes/benchmarks/kube_replicas.py [--apps 1000] [--replicas 1 2 3]
        [--kills 20] [--default-kills 3] [--rest-seconds 30] [--failover-apps 30]

It starts the local control plane (tests/support/localcluster) with kwok nodes for every pod and
measures, with replicas joined through the public API (``adapter.membership``):

- **Lease API calls per replica per second at rest**: 1, 2 and 3 replicas joined in this
  process (default lease timings, each following its ``changes()`` as a host does, no app work),
  counted by each adapter and by the API server (``apiserver_request_total`` of ``leases``, less
  what the control plane's own components make in a window with no replica).
- **First-apply throughput of 1, 2 and 3 replicas over the same apps** (apps/s): N host
  processes join, wait until each sees N members, then apply what each owns; from the start
  signal to the last app's first apply. With each process's CPU (user + sys from ``/proc``) and
  the control plane's. The apps are destroyed (and their namespaces gone) between the counts.
  With the apps of the last count still held, the replicas at rest again (a replica following
  ``changes()`` lists the apps' namespaces each round).
- **Failover**: three host processes over ``--failover-apps`` apps; ``--kills`` times, SIGKILL the
  replica owning a chosen bundle and time, on CLOCK_MONOTONIC (one clock for every process of
  the machine), from the kill to another replica's journal saying it gained the bundle, and to
  its first apply of it; the killed replica is started again (same name) before the next kill.
  Short lease timings (3 s / 2 s / 0.25 s) for the ``--kills``, the defaults (15 s / 10 s / 2 s)
  for ``--default-kills``.

Each host process (``--child host``) writes a JSON-lines journal: ``joined``, ``change``
(members, gained, lost), ``start``, ``applied`` (a bundle), ``refused``/``error``, each with
``t`` (``time.monotonic()``). It does what ``examples/replicas/replica_host.py`` does, with
two things the measurements need and that host lacks: a start signal (the throughput window
opens once every replica sees the others, not while they join) and times on the clock the
kills are timed on. Prints figures; asserts only that the run did what it says (every
app applied, every kill taken over).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from kube_scale import apiserver_requests, cluster_nodes, cpu_seconds, percentile
from kube_warm import config

if TYPE_CHECKING:  # the test support packages join the path in main()
    from localcluster import LocalCluster
    from pando_runtime_kubernetes import KubernetesAdapter

    from pando_runtime import BundlePlan, Membership, OwnershipChange

ROOT = Path(__file__).resolve().parents[3]
SELECTOR = "app.kubernetes.io/managed-by=pando"
SERVER_NAMESPACE = "pando"
"""Where the replicas' Leases live (the adapter's ``server_namespace``, by default)."""
SHORT = (3.0, 2.0, 0.25)
DEFAULTS = (15.0, 10.0, 2.0)
NAMES = ("replica-a", "replica-b", "replica-c")
CONCURRENCY = 16
"""Applies at a time in each host process."""


def bundle_id(prefix: str, i: int) -> str:
    return f"{prefix}-{i:05d}"


def plan(bundle: str) -> BundlePlan:
    import pando_runtime as pr  # noqa: PLC0415 - the parent process plans nothing

    web = pr.WorkloadPlan(
        name="web",
        image="registry.example/bench/app:1",
        ports=(pr.Port(8080),),
        resources=pr.Resources(cpu_millis=10, memory_bytes=16 * 1024**2),
    )
    return pr.BundlePlan(bundle_id=bundle, workloads=(web,))


def adapter_config(kubeconfig: str) -> dict[str, Any]:
    return config(kubeconfig, cache_dir=None)


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# -- the host process ------------------------------------------------------------------------


class HostReplica:
    """A host replica: join, apply what it owns (again after each gain), journal it all."""

    def __init__(self, argv: list[str]) -> None:
        """argv: kubeconfig, name, journal, prefix, apps, lease, renew, retry, wait_members,
        go_file (``-``: start at once)."""
        kubeconfig, self.name, journal, prefix, apps = argv[:5]
        self.timings = tuple(map(float, argv[5:8]))
        self.wait_members, self.go_file = int(argv[8]), argv[9]
        self.config = adapter_config(kubeconfig)
        self.ids = [bundle_id(prefix, i) for i in range(int(apps))]
        self.journal = Path(journal).open("a", buffering=1)  # noqa: SIM115 - lives with the process
        self.applied: set[str] = set()
        self.wake = anyio.Event()

    def write(self, event: str, **fields: Any) -> None:
        record = {"t": time.monotonic(), "replica": self.name, "event": event, **fields}
        self.journal.write(json.dumps(record) + "\n")

    async def run(self) -> None:
        from pando_runtime_kubernetes import KubernetesAdapter  # noqa: PLC0415

        import pando_runtime as pr  # noqa: PLC0415

        lease, renew, retry = self.timings
        settings = pr.MembershipSettings(
            lease_duration=lease, renew_deadline=renew, retry_period=retry
        )
        async with (
            KubernetesAdapter(self.config) as adapter,
            adapter.membership(self.name, settings) as membership,
            membership.changes() as changes,
            anyio.create_task_group() as group,
        ):
            self.write("joined", members=sorted(membership.members()), pid=os.getpid())
            group.start_soon(self.follow, changes)
            group.start_soon(self.sweep, adapter, membership)
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    group.cancel_scope.cancel()
        self.write("left")

    async def follow(self, changes: AsyncIterator[OwnershipChange]) -> None:
        async for change in changes:
            self.write(
                "change",
                members=sorted(change.members),
                gained=sorted(change.gained),
                lost=sorted(change.lost),
            )
            self.applied.difference_update(change.lost)  # applied again once regained
            self.wake.set()

    async def apply(self, adapter: KubernetesAdapter, bundle: str) -> None:
        import pando_runtime as pr  # noqa: PLC0415

        try:
            await adapter.apply(plan(bundle))
        except pr.NotOwner:
            self.write("refused", bundle=bundle)
        except pr.PandoRuntimeError as error:
            self.write("error", bundle=bundle, code=error.code)
        else:
            self.applied.add(bundle)
            self.write("applied", bundle=bundle)

    def ready(self, membership: Membership) -> bool:
        gated = self.go_file != "-" and not Path(self.go_file).exists()
        return len(membership.members()) >= self.wait_members and not gated

    async def sweep(self, adapter: KubernetesAdapter, membership: Membership) -> None:
        while not self.ready(membership):  # noqa: ASYNC110 - polls a file another process makes
            await anyio.sleep(0.05)
        self.write("start", members=sorted(membership.members()))
        limiter = anyio.CapacityLimiter(CONCURRENCY)

        async def one(bundle: str) -> None:
            async with limiter:
                if membership.owns(bundle):
                    await self.apply(adapter, bundle)

        while True:
            todo = [b for b in self.ids if b not in self.applied and membership.owns(b)]
            async with anyio.create_task_group() as batch:
                for bundle in todo:
                    batch.start_soon(one, bundle)
            # Woken by a change; a drained handover ends without one: sweep anyway.
            with anyio.move_on_after(self.timings[2]):
                await self.wake.wait()
            self.wake = anyio.Event()


# -- driving host processes ------------------------------------------------------------------


class Hosts:
    """Host processes and their journals, in a work directory."""

    def __init__(self, work: Path, kubeconfig: str, prefix: str, apps: int) -> None:
        self.work, self.kubeconfig, self.prefix, self.apps = work, kubeconfig, prefix, apps
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.go_file = work / f"go-{prefix}"

    def journal(self, name: str) -> Path:
        return self.work / f"{self.prefix}-{name}.jsonl"

    def start(
        self, name: str, timings: tuple[float, float, float], wait_members: int, *, gated: bool
    ) -> None:
        argv = [sys.executable, __file__, "--child", "host", self.kubeconfig, name]
        argv += [str(self.journal(name)), self.prefix, str(self.apps)]
        argv += [*map(str, timings), str(wait_members), str(self.go_file) if gated else "-"]
        log = (self.work / f"{self.prefix}-{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(argv, stdout=log, stderr=log)

    def records(self, event: str | None = None) -> list[dict[str, Any]]:
        found = []
        for name in self.processes:
            path = self.journal(name)
            if not path.exists():
                continue
            for line in path.read_text().splitlines():
                if not line.endswith("}"):
                    continue  # a line a killed process did not finish
                record = json.loads(line)
                if event is None or record["event"] == event:
                    found.append(record)
        return sorted(found, key=lambda r: r["t"])

    def applied(self) -> set[str]:
        return {r["bundle"] for r in self.records("applied")}

    def kill(self, name: str) -> float:
        process = self.processes[name]
        process.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        process.wait()
        return killed

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                log = (self.work / f"{self.prefix}-{name}.log").read_text()[-3000:]
                raise RuntimeError(f"host {name} exited ({process.returncode}):\n{log}")


def wait_for(
    check: Callable[[], object], timeout: float, what: str, hosts: Hosts | None = None
) -> None:
    """Poll ``check()`` until it holds; a bound that only catches a hang."""
    deadline = time.monotonic() + timeout
    while not check():
        if hosts is not None:
            hosts.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:g} s: {what}")
        time.sleep(0.05)


@contextlib.contextmanager
def hosts_running(work: Path, kubeconfig: str, prefix: str, apps: int) -> Iterator[Hosts]:
    hosts = Hosts(work, kubeconfig, prefix, apps)
    try:
        yield hosts
    finally:
        hosts.stop_all()


# -- at rest ---------------------------------------------------------------------------------


def server_leases(cluster: LocalCluster) -> Counter[str]:
    return Counter({k: v for k, v in apiserver_requests(cluster).items() if k.endswith(" leases")})


@dataclasses.dataclass(frozen=True)
class AtRest:
    """What ``replicas`` joined replicas called over ``seconds`` with ``apps`` apps held."""

    replicas: int
    seconds: float
    kinds: Counter[str]
    """The adapters' calls by kind."""
    server: Counter[str]
    """The API server's Lease requests (every client's) by verb."""
    received: int
    """Bytes the adapters received."""
    apps: int

    def server_rate(self) -> float:
        """The API server's Lease requests per second."""
        return sum(self.server.values()) / self.seconds


async def at_rest(cluster: LocalCluster, replicas: int, seconds: float, apps: int = 0) -> AtRest:
    """``replicas`` joined (default timings, following changes); their calls over ``seconds``.

    ``apps``: how many apps the cluster holds (none applied or changed in the window).
    """
    from pando_runtime_kubernetes import KubernetesAdapter  # noqa: PLC0415

    config = adapter_config(str(cluster.kubeconfig))
    async with contextlib.AsyncExitStack() as stack:
        adapters = [
            await stack.enter_async_context(KubernetesAdapter(config)) for _ in range(replicas)
        ]
        group = await stack.enter_async_context(anyio.create_task_group())
        for name, adapter in zip(NAMES, adapters, strict=False):
            membership = await stack.enter_async_context(adapter.membership(name))
            changes = await stack.enter_async_context(membership.changes())

            async def drain(changes: AsyncIterator[OwnershipChange] = changes) -> None:
                async for _ in changes:
                    pass

            group.start_soon(drain)
        await anyio.sleep(2 * DEFAULTS[2])  # every replica has read the others
        transports = [await a.session.connection.transport() for a in adapters]
        before = [Counter(a.session.connection.calls_by_kind) for a in adapters]
        received = sum(t.bytes_received for t in transports)
        server_before = server_leases(cluster)
        await anyio.sleep(seconds)
        server = server_leases(cluster) - server_before
        received = sum(t.bytes_received for t in transports) - received
        kinds: Counter[str] = Counter()
        for adapter, counted in zip(adapters, before, strict=True):
            kinds.update(Counter(adapter.session.connection.calls_by_kind) - counted)
        group.cancel_scope.cancel()
    return AtRest(replicas, seconds, kinds, server, received, apps)


def report_rest(results: list[AtRest]) -> None:
    base = results[0]
    print(
        f"at rest, no replica: API server {base.server_rate():.2f} Lease requests/s from the "
        f"control plane's own components ("
        + ", ".join(f"{k} {v}" for k, v in base.server.items())
        + "; less from each figure below)"
    )
    for r in results[1:]:
        report_rest_row(r, base.server_rate())


def report_rest_row(r: AtRest, base_rate: float) -> None:
    n, s = r.replicas, r.seconds
    adapter_leases = sum(v for k, v in r.kinds.items() if k.endswith(" leases"))
    adapter_all = sum(r.kinds.values())
    server = r.server_rate() - base_rate
    kinds = ", ".join(f"{k} {v / n / s:.2f}" for k, v in sorted(r.kinds.items()))
    print(
        f"at rest, {n} replica(s), {r.apps:,} apps held: per replica per second, Lease "
        f"calls: adapter {adapter_leases / n / s:.2f}, API server {server / n:.2f}; every "
        f"call of the adapter {adapter_all / n / s:.2f} ({kinds}), "
        f"{r.received / n / s / 1024:,.1f} KiB received ({s:g} s window)"
    )


# -- first-apply throughput ------------------------------------------------------------------


def control_plane_pids(cluster: LocalCluster) -> dict[str, int]:
    return {name: c.pid for name, c in cluster.components.items() if c.pid}


def throughput(cluster: LocalCluster, work: Path, replicas: int, apps: int) -> dict[str, Any]:
    """``replicas`` host processes apply the same ``apps`` apps, each what it owns."""
    kubeconfig = str(cluster.kubeconfig)
    with hosts_running(work, kubeconfig, f"tp{replicas}", apps) as hosts:
        for name in NAMES[:replicas]:
            hosts.start(name, DEFAULTS, replicas, gated=True)
        # Joined, and each one's view holds every member: the window starts at the signal.
        wait_for(
            lambda: (
                len(
                    {r["replica"] for r in hosts.records("change") if len(r["members"]) == replicas}
                )
                == replicas
            ),
            120,
            f"{replicas} replicas see each other",
            hosts,
        )
        pids = {name: p.pid for name, p in hosts.processes.items()}
        pids |= control_plane_pids(cluster)
        load_before = load_average()
        server_before = apiserver_requests(cluster)
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        hosts.go_file.touch()
        go = time.monotonic()
        wait_for(lambda: len(hosts.applied()) >= apps, max(600, apps), "every app applied", hosts)
        cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
        server = apiserver_requests(cluster) - server_before
        applies = hosts.records("applied")
        firsts: dict[str, dict[str, Any]] = {}
        for record in applies:
            firsts.setdefault(record["bundle"], record)
        seconds = max(r["t"] for r in firsts.values()) - go
        by_replica = Counter(r["replica"] for r in firsts.values())
        refused = len(hosts.records("refused"))
        errors = Counter(r["code"] for r in hosts.records("error"))
    return {
        "replicas": replicas,
        "apps": apps,
        "seconds": seconds,
        "rate": apps / seconds,
        "cpu": cpu,
        "server_calls": sum(v for v in server.values() if v > 0) / apps,
        "by_replica": by_replica,
        "twice": len(applies) - len(firsts),
        "refused": refused,
        "errors": errors,
        "load": (load_before, load_average()),
    }


def report_throughput(r: dict[str, Any]) -> None:
    s = r["seconds"]
    cpu = sorted(r["cpu"].items(), key=lambda item: -item[1])
    print(
        f"first apply, {r['replicas']} replica(s): {r['rate']:.1f} apps/s ({r['apps']:,} apps "
        f"in {s:.1f} s; each replica's: "
        + ", ".join(f"{k} {v}" for k, v in sorted(r["by_replica"].items()))
        + f"; applied by two: {r['twice']}, refused {r['refused']}, errors "
        f"{dict(r['errors']) or 0}); API server {r['server_calls']:.1f} requests per app"
    )
    print(
        "  CPU in the window, cores (ms per app): "
        + ", ".join(f"{k} {v / s:.2f} ({v / r['apps'] * 1000:.1f})" for k, v in cpu)
        + f"; all {sum(v for _, v in cpu) / r['apps'] * 1000:.0f} ms per app; load average "
        f"{r['load'][0]} before, {r['load'][1]} after"
    )


def destroy_all(kubeconfig: str, ids: list[str], cluster: LocalCluster) -> None:
    """Destroy the apps (no membership: a host that never joined) and wait for their namespaces."""
    from pando_runtime_kubernetes import KubernetesAdapter  # noqa: PLC0415

    from pando_runtime import BundleRef  # noqa: PLC0415

    async def run() -> None:
        async with KubernetesAdapter(adapter_config(kubeconfig)) as adapter:
            limiter = anyio.CapacityLimiter(CONCURRENCY)

            async def one(bundle: str) -> None:
                async with limiter:
                    await adapter.destroy(BundleRef(bundle))

            async with anyio.create_task_group() as group:
                for bundle in ids:
                    group.start_soon(one, bundle)

    anyio.run(run)

    def gone() -> bool:
        status, body = cluster.rest.get(f"/api/v1/namespaces?labelSelector={SELECTOR}&limit=1")
        return status == 200 and not body["items"]  # noqa: PLR2004

    wait_for(gone, 600, "the destroyed apps' namespaces are gone")


# -- failover --------------------------------------------------------------------------------


def failover(
    cluster: LocalCluster, work: Path, timings: tuple[float, float, float], kills: int, apps: int
) -> dict[str, Any]:
    """SIGKILL the owner of a chosen bundle ``kills`` times; time the takeover."""
    import pando_runtime as pr  # noqa: PLC0415

    prefix = f"fo{int(timings[0])}"
    lease = timings[0]
    gains: list[float] = []
    firsts: list[float] = []
    with hosts_running(work, str(cluster.kubeconfig), prefix, apps) as hosts:
        for name in NAMES:
            hosts.start(name, timings, len(NAMES), gated=False)
        wait_for(lambda: len(hosts.applied()) >= apps, 300, "every app applied", hosts)
        for k in range(kills):
            bundle = bundle_id(prefix, k % apps)
            victim = pr.rendezvous_owner(bundle, NAMES)
            assert victim is not None
            killed = hosts.kill(victim)

            def taken(event: str, killed: float = killed, bundle: str = bundle) -> Any:
                for r in hosts.records(event):
                    held = r.get("gained", [r.get("bundle")])
                    if r["t"] > killed and bundle in held:
                        return r
                return None

            wait_for(lambda: taken("change") and taken("applied"), 3 * lease + 30, "a takeover")
            gained, applied = taken("change"), taken("applied")
            assert gained["replica"] != victim, "another replica took it"
            gains.append(gained["t"] - killed)
            firsts.append(applied["t"] - killed)
            print(
                f"  kill {k + 1}/{kills}: {victim} owned {bundle}; gained by "
                f"{gained['replica']} after {gains[-1]:.2f} s, applied after {firsts[-1]:.2f} s",
                file=sys.stderr,
            )
            # The victim again, under its name: it takes the bundle back (a drained handover).
            restarted = time.monotonic()
            hosts.start(victim, timings, 0, gated=False)

            def back(victim: str = victim, restarted: float = restarted) -> bool:
                return any(
                    r["replica"] == victim and r["t"] > restarted for r in hosts.records("applied")
                ) and all(len(r["members"]) == len(NAMES) for r in latest_changes(hosts).values())

            wait_for(back, 3 * lease + 60, f"{victim} back", hosts)
        hosts.check_alive()
    return {"timings": timings, "kills": kills, "gains": gains, "firsts": firsts}


def latest_changes(hosts: Hosts) -> dict[str, dict[str, Any]]:
    latest: dict[str, dict[str, Any]] = {}
    for r in hosts.records("change"):
        latest[r["replica"]] = r
    return latest


def report_failover(r: dict[str, Any]) -> None:
    lease, renew, retry = r["timings"]
    gains, firsts = r["gains"], r["firsts"]
    print(
        f"failover (lease {lease:g} s, renew deadline {renew:g} s, retry {retry:g} s), "
        f"{r['kills']} SIGKILLs of the owner: kill -> gained p50 {percentile(gains, 0.5):.2f} s, "
        f"p99 {percentile(gains, 0.99):.2f} s, max {max(gains):.2f} s; kill -> first apply by "
        f"the new owner p50 {percentile(firsts, 0.5):.2f} s, p99 {percentile(firsts, 0.99):.2f} s"
        f" (by the rule, the lease duration after the last renewal seen, read within a retry"
        f" period: {lease - retry:g} to {lease + 2 * retry:g} s)"
    )


# -- main ------------------------------------------------------------------------------------


def prepare(cluster: LocalCluster) -> None:
    """The host's namespace, where the Leases live (an installer's part)."""
    status, body = cluster.rest.post("/api/v1/namespaces", {"metadata": {"name": SERVER_NAMESPACE}})
    assert status in (201, 409), f"namespace {SERVER_NAMESPACE}: HTTP {status} {body}"


def run(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localcluster import LocalCluster  # noqa: PLC0415

    started = time.perf_counter()
    nodes = cluster_nodes(max(args.apps, args.failover_apps))
    with (
        LocalCluster(nodes=nodes, start_timeout=300) as cluster,
        tempfile.TemporaryDirectory(prefix="kube-replicas-") as work_dir,
    ):
        work = Path(work_dir)
        prepare(cluster)
        print(
            f"(control plane up in {time.perf_counter() - started:.0f} s; "
            f"{os.cpu_count()} cores, load average {load_average()})",
            flush=True,
        )
        rest = [anyio.run(at_rest, cluster, n, args.rest_seconds) for n in (0, 1, 2, 3)]
        report_rest(rest)
        for replicas in args.replicas:
            report_throughput(throughput(cluster, work, replicas, args.apps))
            if replicas == max(args.replicas):
                # The namespace list each round of a replica following changes, with apps held.
                held = anyio.run(at_rest, cluster, replicas, args.rest_seconds, args.apps)
                report_rest_row(held, rest[0].server_rate())
            if replicas != args.replicas[-1] or args.kills or args.default_kills:
                ids = [bundle_id(f"tp{replicas}", i) for i in range(args.apps)]
                destroy_all(str(cluster.kubeconfig), ids, cluster)
        sys.stdout.flush()
        if args.kills:
            report_failover(failover(cluster, work, SHORT, args.kills, args.failover_apps))
        if args.default_kills:
            report_failover(
                failover(cluster, work, DEFAULTS, args.default_kills, args.failover_apps)
            )
        print(f"(load average at the end {load_average()})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--apps", type=int, default=1000, help="apps of the throughput runs")
    parser.add_argument(
        "--replicas", type=int, nargs="+", default=[1, 2, 3], help="throughput runs' counts"
    )
    parser.add_argument("--kills", type=int, default=20, help="kills with short lease timings")
    parser.add_argument("--default-kills", type=int, default=3, help="kills at the defaults")
    parser.add_argument("--failover-apps", type=int, default=30)
    parser.add_argument("--rest-seconds", type=float, default=30.0)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "host":
            anyio.run(HostReplica(rest).run)
        return
    run(args)


if __name__ == "__main__":
    main()
