"""Several host replicas as real processes on the local control plane, checked by the audit log.

Each replica is ``examples/replicas/replica_host.py`` (the library's public API only), run as
the restricted user bound to the documented roles. Their journals say when each saw it owned
an app and when it applied it; the API server's audit log says which replica wrote what (each
names itself in its User-Agent). From the two: a killed replica's apps move once its lease
has expired, every app ends applied once, and no app's objects are written by two replicas at
a time, across a kill, a join, a leave and a partition.

Figures (failover times, wall times, the audit log's size) are printed (``-s``), never
asserted: the machine's load sets them (``docs/reliability.md`` has them, dated).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from _replica_hosts import SETTINGS, HostProcess, Journal, bundle_writes, overlaps, until
from localcluster import read_audit_log
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import LABEL_BUNDLE, LABEL_WORKLOAD, namespace_for
from pando_runtime_kubernetes.api._http import user_agent
from pando_runtime_kubernetes.features._membership import LABEL_GROUP

import pando_runtime as pr

pytestmark = [pytest.mark.kube, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the replicas are processes: the test's own loop hardly matters


@pytest.fixture
def audit_log(kube_cluster: Any) -> Path:
    if kube_cluster.local is None:
        pytest.skip("only the local control plane writes an audit log")
    path: Path = kube_cluster.local.audit_log
    return path


class Hosts:
    """The replica processes of one test, sharing one list of apps."""

    def __init__(self, workdir: Path, config: dict[str, Any], prefix: str, apps: int) -> None:
        self.workdir = workdir
        self.prefix = prefix
        self.apps = [f"{prefix}-{n}" for n in range(apps)]
        self.config = self.write_config("adapter", config)
        self.running: dict[str, HostProcess] = {}
        self.gone: list[HostProcess] = []

    def write_config(self, name: str, config: dict[str, Any]) -> Path:
        path = self.workdir / f"{name}.json"
        path.write_text(json.dumps(config))
        return path

    def start(self, replica: str, config: Path | None = None) -> HostProcess:
        name = f"{self.prefix}-{replica}"
        config = config or self.config
        host = HostProcess.start(self.workdir, config, name, len(self.apps), self.prefix)
        self.running[replica] = host
        return host

    def kill(self, replica: str) -> float:
        host = self.running.pop(replica)
        self.gone.append(host)
        return host.kill()

    async def kill_mid_apply(
        self, *, started: tuple[str, ...], victim: str, after: int
    ) -> tuple[HostProcess, float]:
        """Start ``started``; SIGKILL ``victim`` once it applied ``after`` apps, mid-apply."""
        for replica in started:
            self.start(replica)
        host = self.running[victim]
        await until(lambda: mid_apply(host, after))
        return host, self.kill(victim)

    def stop(self, replica: str) -> None:
        host = self.running.pop(replica)
        self.gone.append(host)
        assert host.stop() == 0, (host.journal_path.parent / f"{host.name}.log").read_text()

    def journals(self) -> dict[str, Journal]:
        hosts = [*self.gone, *self.running.values()]
        return {host.name: host.journal() for host in hosts}

    def applied_by_running(self) -> set[str]:
        return set().union(*(host.journal().applied() for host in self.running.values()))

    def owned_by_running(self) -> list[set[str]]:
        return [host.journal().owned() for host in self.running.values()]

    def ensure_gone(self) -> None:
        for host in self.running.values():
            host.ensure_gone()


def mid_apply(host: HostProcess, applied: int) -> bool:
    journal = host.journal()
    return len(journal.applied()) >= applied and bool(journal.in_flight())


ROOM = "kwok-replicas"
"""A third node for the session's cluster while these tests run: two hold 110 pods each."""


@pytest.fixture
def room(kube_cluster: Any, admin_api: Any) -> Iterator[None]:
    from kubernetes import client  # noqa: PLC0415

    kube_cluster.add_node(ROOM, cpu="8", memory="16Gi", pods=320)
    try:
        yield
    finally:
        client.CoreV1Api(admin_api).delete_node(ROOM)


@pytest.fixture
async def make_hosts(
    tmp_path: Path, adapter_config: dict[str, Any], room: None
) -> AsyncIterator[Any]:
    """``make_hosts(prefix, apps)``; the processes are killed and the apps destroyed after."""
    made: list[Hosts] = []

    def make(prefix: str, apps: int) -> Hosts:
        hosts = Hosts(tmp_path, adapter_config, prefix, apps)
        made.append(hosts)
        return hosts

    try:
        yield make
    finally:
        for hosts in made:
            hosts.ensure_gone()
        async with KubernetesAdapter(adapter_config) as adapter:
            limiter = anyio.CapacityLimiter(8)

            async def destroy(app: str) -> None:
                async with limiter:
                    await adapter.destroy(pr.BundleRef(app))

            with anyio.CancelScope(shield=True):
                async with anyio.create_task_group() as group:
                    for hosts in made:
                        for app in hosts.apps:
                            group.start_soon(destroy, app)


async def assert_converged(
    adapter_config: dict[str, Any], admin_api: Any, apps: list[str], prefix: str
) -> None:
    """Every app applied and observed; one namespace per app, one pod per workload, no orphan."""
    from kubernetes import client  # noqa: PLC0415

    async with KubernetesAdapter(adapter_config) as adapter:
        for app in apps:
            observed = await adapter.observe(pr.BundleRef(app))
            assert observed.exists, app
            assert observed.workload("web").name == "web"
    core = client.CoreV1Api(admin_api)
    mine = f"pando-{prefix}-"
    namespaces = [
        ns
        for ns in core.list_namespace(label_selector=LABEL_BUNDLE).items
        if ns.metadata.name.startswith(mine) and ns.status.phase != "Terminating"
    ]
    assert sorted(ns.metadata.name for ns in namespaces) == sorted(namespace_for(a) for a in apps)
    per_bundle = Counter(ns.metadata.labels[LABEL_BUNDLE] for ns in namespaces)
    assert set(per_bundle.values()) == {1}, "no two namespaces for one bundle"
    pods = [
        pod
        for pod in core.list_pod_for_all_namespaces(label_selector=LABEL_WORKLOAD).items
        if pod.metadata.namespace.startswith(mine) and pod.metadata.deletion_timestamp is None
    ]
    per_workload = Counter((p.metadata.namespace, p.metadata.labels[LABEL_WORKLOAD]) for p in pods)
    assert per_workload == Counter({(namespace_for(a), "web"): 1 for a in apps}), (
        "one pod per workload: no duplicate, no orphan"
    )


def replica_leases(admin_api: Any, prefix: str) -> list[str]:
    from kubernetes import client  # noqa: PLC0415

    found = client.CoordinationV1Api(admin_api).list_namespaced_lease(
        "pando", label_selector=f"{LABEL_GROUP}=members"
    )
    names = [lease.metadata.name for lease in found.items]
    return [n for n in names if n.startswith(f"pando-replica-{prefix}-")]


def assert_no_overlap(records: list[Any], journals: dict[str, Journal], apps: list[str]) -> None:
    problems = overlaps(records, journals, apps)
    assert not problems, f"{len(problems)} overlaps:\n" + "\n".join(problems[:30])


def _spread(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    return (
        f"first {ordered[0]:.2f} s, median {ordered[len(ordered) // 2]:.2f} s, "
        f"last {ordered[-1]:.2f} s"
    )


def audit_report(audit_log: Path, apps: list[str], started: float) -> list[Any]:
    records = [r for r in read_audit_log(audit_log) if r.time >= started]
    writes = bundle_writes(records, apps)
    print(  # noqa: T201 - the figures of the run
        f"audit log: {audit_log.stat().st_size / 1e6:.1f} MB in all; this test: {len(records)} "
        f"records, {len(writes)} writes of its apps' objects"
    )
    return records


async def test_three_hosts_share_300_apps_and_a_killed_ones_move_within_the_lease(
    make_hosts: Any, adapter_config: dict[str, Any], admin_api: Any, audit_log: Path
) -> None:
    began = time.time()
    hosts = make_hosts("kill", 300)
    victim, killed_at = await hosts.kill_mid_apply(started=("a", "b", "c"), victim="b", after=10)
    dead = victim.journal()
    assert dead.in_flight(), "killed mid-apply"
    orphaned = dead.owned()
    assert orphaned, "the killed replica owned apps"

    await until(lambda: hosts.applied_by_running() == set(hosts.apps), within=300)
    journals = hosts.journals()
    survivors = [journals[h.name] for h in hosts.running.values()]
    records = audit_report(audit_log, hosts.apps, began)
    renewed = max(
        r.time
        for r in records
        if r.replica == "kill-b" and r.resource == "leases" and r.verb == "update" and r.code == 200
    )
    after_renewal, after_kill = [], []
    for app in orphaned:
        taken = [t for j in survivors if (t := j.gained_at(app, after=killed_at)) is not None]
        assert taken, f"{app} was taken over"
        assert min(taken) > renewed + SETTINGS.lease_duration, "only once the lease expired"
        after_renewal.append(min(taken) - renewed)
        after_kill.append(min(taken) - killed_at)
    print(  # noqa: T201 - the figures of the run
        f"{len(orphaned)} apps taken over; after the last renewal: {_spread(after_renewal)}; "
        f"after SIGKILL: {_spread(after_kill)} (lease {SETTINGS.lease_duration:g} s, "
        f"retry {SETTINGS.retry_period:g} s)"
    )

    await assert_converged(adapter_config, admin_api, hosts.apps, "kill")
    assert_no_overlap(records, journals, hosts.apps)
    writers = {r.replica for r in bundle_writes(records, hosts.apps) if r.replica}
    assert writers == {"kill-a", "kill-b", "kill-c"}
    for record in bundle_writes(records, hosts.apps):
        if record.replica:
            assert record.user_agent == user_agent(record.replica)

    for replica in list(hosts.running):
        hosts.stop(replica)
    assert replica_leases(admin_api, "kill") == [], "the dead replica's lease was removed too"
    print(f"wall time: {time.time() - began:.1f} s")  # noqa: T201


async def test_no_app_is_written_by_two_replicas_across_a_kill_a_join_and_a_leave(
    make_hosts: Any, adapter_config: dict[str, Any], admin_api: Any, audit_log: Path
) -> None:
    began = time.time()
    hosts = make_hosts("turn", 150)
    await hosts.kill_mid_apply(started=("a", "b", "c"), victim="a", after=5)
    joined = hosts.start("d")  # joins while the dead one's lease still runs
    await until(lambda: len(joined.journal().applied()) >= 5)
    hosts.stop("c")  # a leave: its apps move at once (a rebalance)
    await until(lambda: hosts.applied_by_running() == set(hosts.apps), within=300)
    owned = hosts.owned_by_running()
    assert sum(len(o) for o in owned) == len(hosts.apps), "each app owned once"
    assert set().union(*owned) == set(hosts.apps)

    await assert_converged(adapter_config, admin_api, hosts.apps, "turn")
    journals = hosts.journals()
    records = audit_report(audit_log, hosts.apps, began)
    writers = {r.replica for r in bundle_writes(records, hosts.apps) if r.replica}
    assert {"turn-a", "turn-d"} <= writers, "the killed and the joined replica both wrote"
    assert_no_overlap(records, journals, hosts.apps)
    print(f"wall time: {time.time() - began:.1f} s")  # noqa: T201


async def test_a_replica_cut_off_writes_nothing_after_its_deadline_and_nothing_stale_back(  # noqa: PLR0917 - fixtures
    make_hosts: Any,
    adapter_config: dict[str, Any],
    conformance_config: dict[str, Any],
    apiserver_proxy: Any,
    admin_api: Any,
    audit_log: Path,
) -> None:
    """c reaches the API server through a Toxiproxy proxy; a and b directly."""
    if apiserver_proxy is None:
        pytest.skip("no Toxiproxy proxy on this backend")
    toxiproxy, proxy = apiserver_proxy.toxiproxy, apiserver_proxy.proxy.name
    began = time.time()
    hosts = make_hosts("cut", 60)
    hosts.start("a")
    hosts.start("b")
    cut = hosts.start("c", hosts.write_config("through-proxy", conformance_config))
    await until(lambda: hosts.applied_by_running() == set(hosts.apps))
    await until(lambda: bool(cut.journal().owned()))
    await until(lambda: sum(len(o) for o in hosts.owned_by_running()) == len(hosts.apps))
    had = cut.journal().owned()
    try:
        cut_at = time.time()
        await anyio.to_thread.run_sync(lambda: toxiproxy.set_enabled(proxy, False))
        await until(lambda: not cut.journal().owned())
        others = [hosts.running["a"], hosts.running["b"]]
        await until(lambda: set().union(*(h.journal().owned() for h in others)) == set(hosts.apps))
        while_cut = cut.journal()
        for app in had:
            lost = while_cut.lost_at(app, after=cut_at)
            assert lost is not None
            taken = [t for h in others if (t := h.journal().gained_at(app, after=cut_at))]
            assert taken, f"{app} taken over"
            assert min(taken) > lost, f"{app}: taken only after c let go"
        healed_at = time.time()
        await anyio.to_thread.run_sync(lambda: toxiproxy.set_enabled(proxy, True))
    finally:
        toxiproxy.reset()
    await until(lambda: sum(len(o) for o in hosts.owned_by_running()) == len(hosts.apps))
    await until(lambda: cut.journal().owned() == {a for a in hosts.apps if _owner(a) == "cut-c"})

    records = audit_report(audit_log, hosts.apps, began)
    by_c = [r for r in records if r.replica == "cut-c"]
    deadline = cut_at + SETTINGS.renew_deadline
    assert [r for r in by_c if deadline < r.time < healed_at] == [], "nothing while cut off"
    back = cut.journal()
    for record in bundle_writes([r for r in by_c if r.time > healed_at], hosts.apps):
        app = next(a for a in hosts.apps if namespace_for(a) in (record.namespace, record.name))
        assert back.tenure_of(app, record.time) is not None, f"stale write of {app}"
    assert_no_overlap(records, hosts.journals(), hosts.apps)
    await assert_converged(adapter_config, admin_api, hosts.apps, "cut")
    print(f"wall time: {time.time() - began:.1f} s")  # noqa: T201


def _owner(app: str) -> str | None:
    return pr.rendezvous_owner(app, ["cut-a", "cut-b", "cut-c"])


@pytest.mark.every_minor
async def test_the_audit_log_names_each_writes_replica_and_a_lone_adapters_version(
    adapter_config: dict[str, Any], audit_log: Path
) -> None:
    began = time.time()
    app = "audited-0"
    plan = pr.BundlePlan(
        bundle_id=app, workloads=(pr.WorkloadPlan(name="web", image="registry.example/app:1"),)
    )
    async with (
        KubernetesAdapter(adapter_config) as member,
        member.membership("audited-a", SETTINGS) as membership,
    ):
        await until(lambda: membership.owns(app), within=30)
        await member.apply(plan)
    async with KubernetesAdapter(adapter_config) as alone:
        await alone.destroy(pr.BundleRef(app))
    records = [r for r in read_audit_log(audit_log) if r.time >= began]
    writes = bundle_writes(records, [app])
    created = [r for r in writes if (r.verb, r.resource) == ("create", "namespaces")]
    assert [r.user_agent for r in created] == [user_agent("audited-a")]
    deleted = [r for r in writes if (r.verb, r.resource) == ("delete", "namespaces")]
    assert [r.user_agent for r in deleted] == [user_agent()]
    # The lone adapter's destroy (its pods, then the namespace) came after every member write.
    lone = [r for r in writes if r.user_agent == user_agent()]
    assert deleted[0] in lone
    assert {r.resource for r in lone} <= {"pods", "namespaces"}
    assert {r.user_agent for r in writes if r.time < lone[0].time} == {user_agent("audited-a")}
    leases = [r for r in records if r.name == "pando-replica-audited-a"]
    assert {(r.verb, r.replica) for r in leases} >= {
        ("create", "audited-a"),
        ("delete", "audited-a"),
    }
