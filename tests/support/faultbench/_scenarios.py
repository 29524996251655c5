"""The fault scenarios, each bounded in time and count, each returning a :class:`ScenarioResult`.

Every scenario runs a real :class:`~pando_runtime_kubernetes.KubernetesAdapter` as the
restricted identity, through the bench's Toxiproxy, and leaves every component healed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable

import anyio
import anyio.abc
import anyio.to_thread
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import namespace_for

from pando_runtime import (
    BundleEvent,
    BundleEventKind,
    BundlePlan,
    BundleRef,
    PandoRuntimeError,
    RateLimited,
)

from ._bench import FaultBench, app_plan
from ._result import ScenarioResult

__all__ = [
    "component_restarted",
    "flow_counts",
    "latency_and_hang",
    "throttled",
    "watch_resets",
]


async def _apply_all(
    adapter: KubernetesAdapter, plans: Iterable[BundlePlan], result: ScenarioResult
) -> list[str]:
    """Apply every plan concurrently; the ids whose apply failed (each error counted)."""
    failed: list[str] = []

    async def one(plan: BundlePlan) -> None:
        try:
            await adapter.apply(plan)
        except Exception as error:  # noqa: BLE001 - every error is counted by its code
            result.record(error)
            failed.append(plan.bundle_id)

    async with anyio.create_task_group() as group:
        for plan in plans:
            group.start_soon(one, plan)
    return failed


async def _converge(
    adapter: KubernetesAdapter,
    plans: dict[str, BundlePlan],
    result: ScenarioResult,
    *,
    within: float = 120.0,
) -> float:
    """Re-apply every plan until each apply succeeds; the seconds it took."""
    started = time.monotonic()
    pending = list(plans.values())
    with anyio.fail_after(within):
        while pending:
            failed = set(await _apply_all(adapter, pending, result))
            pending = [p for p in pending if p.bundle_id in failed]
            if pending:
                await anyio.sleep(0.5)
    return time.monotonic() - started


def _prefix(plans: dict[str, BundlePlan]) -> str:
    """The namespace prefix of one run's apps (their ids share ``<run prefix>-``)."""
    first = next(iter(plans))
    return namespace_for(first.rsplit("-", 1)[0] + "-")


async def _settle(
    bench: FaultBench, adapter: KubernetesAdapter, plans: dict[str, BundlePlan], within: float
) -> None:
    """Wait (bounded) until the cluster holds one live pod per planned workload."""
    expected = {namespace_for(p.bundle_id): p for p in plans.values()}
    prefix = _prefix(plans)
    with anyio.move_on_after(within):
        while True:
            duplicates, orphans = await anyio.to_thread.run_sync(bench.audit, expected, prefix)
            observed = [await adapter.observe(BundleRef(i)) for i in plans]
            if not duplicates and not orphans and all(o.all_running for o in observed):
                return
            await anyio.sleep(0.5)


async def _agreement(
    bench: FaultBench, adapter: KubernetesAdapter, plans: dict[str, BundlePlan]
) -> int:
    """Workloads whose observed instance is not the one live pod on the cluster."""
    live: dict[tuple[str, str], set[str]] = {}
    for pod in await anyio.to_thread.run_sync(bench.managed_pods):
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        workload = (meta.get("labels") or {}).get("pando.dev/workload")
        if workload:
            live.setdefault((meta["namespace"], workload), set()).add(meta["uid"])
    disagree = 0
    for bundle_id, plan in plans.items():
        observed = await adapter.observe(BundleRef(bundle_id))
        for workload in plan.workloads:
            uids = live.get((namespace_for(bundle_id), workload.name), set())
            seen = observed.workload(workload.name).instance_id
            if uids != {seen}:
                disagree += 1
    return disagree


async def _finish(
    bench: FaultBench,
    adapter: KubernetesAdapter,
    plans: dict[str, BundlePlan],
    result: ScenarioResult,
) -> None:
    """Settle, then count duplicates, orphans and disagreements; destroy the apps."""
    await _settle(bench, adapter, plans, within=60)
    expected = {namespace_for(p.bundle_id): p for p in plans.values()}
    result.duplicates, result.orphans = await anyio.to_thread.run_sync(
        bench.audit, expected, _prefix(plans)
    )
    result.extra["disagreements"] = await _agreement(bench, adapter, plans)
    result.retries += adapter.session.connection.api_retries
    for bundle_id in plans:
        await adapter.destroy(BundleRef(bundle_id))


# -- a component killed (or restarted) in the middle of concurrent applies -------------------


async def component_restarted(
    bench: FaultBench,
    *,
    component: str = "kube-apiserver",
    rounds: int = 3,
    apps: int = 8,
    down_for: float = 1.0,
    name: str | None = None,
) -> ScenarioResult:
    """Each round: apply ``apps`` apps (a new version of one workload each), kill
    ``component`` in the middle, restart it with the same flags and data after ``down_for``
    seconds, then re-apply until every apply succeeds (the recovery time)."""
    result = ScenarioResult(name or f"{component} killed mid-apply")
    run = bench.run_prefix("kill")
    ids = [bench.new_id(run) for _ in range(apps)]
    async with KubernetesAdapter(bench.settings()) as adapter:
        plans = {i: app_plan(i, 0) for i in ids}
        await _converge(adapter, plans, result)
        for round_number in range(1, rounds + 1):
            plans = {i: app_plan(i, round_number) for i in ids}
            async with anyio.create_task_group() as group:
                group.start_soon(_apply_all, adapter, list(plans.values()), result)
                await anyio.sleep(0.3)  # mid-apply: some writes done, others not yet
                await anyio.to_thread.run_sync(
                    lambda: bench.cluster.restart(component, down_for=down_for)
                )
            result.recovery.append(await _converge(adapter, plans, result))
            result.rounds += 1
        await _finish(bench, adapter, plans, result)
    return result


# -- watch connections cut while pods change --------------------------------------------------


class _EventLog:
    """A host's event consumer: when each app's ``api`` started, and when it was told that
    events may have been lost (``MISSED``, or a stream lost and opened again)."""

    def __init__(self, adapter: KubernetesAdapter, ids: Iterable[str], result: ScenarioResult):
        self.adapter = adapter
        self.result = result
        self.started: dict[str, list[float]] = {i: [] for i in ids}
        self.covered: list[float] = []
        self.silent_ends = 0
        """Streams that ended without an error (must be 0: a lost stream says so)."""

    def _seen(self, event: BundleEvent, first: bool) -> None:
        now = time.monotonic()
        if event.kind is BundleEventKind.WATCHING and not first:
            self.covered.append(now)  # a new stream: what happened in between is unknown
        elif event.kind is BundleEventKind.MISSED:
            self.covered.append(now)
        elif event.kind is BundleEventKind.STARTED and event.workload == "api":
            self.started.get(event.bundle_id or "", []).append(now)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Consume events until cancelled, reopening a lost stream."""
        first = True
        while True:
            try:
                async with self.adapter.watch_bundles() as events:
                    async for event in events:
                        self._seen(event, first)
                        if first:
                            task_status.started()
                            first = False
                self.silent_ends += 1
            except PandoRuntimeError as error:
                self.result.record(error)
                self.result.extra["streams lost"] = self.result.extra.get("streams lost", 0) + 1
            await anyio.sleep(0.2)

    def heard(self, bundle_id: str, since: float) -> bool:
        """Whether a start of ``bundle_id``'s api since ``since`` was delivered or covered."""
        return any(t >= since for t in self.started[bundle_id]) or any(
            t >= since for t in self.covered
        )


async def _cut(bench: FaultBench, index: int) -> None:
    """Cut every connection through the proxy: ``reset_peer`` and disabling, in turn."""
    toxiproxy, proxy = bench.proxy.toxiproxy, bench.proxy.proxy.name
    if index % 2:
        with toxiproxy.toxic(proxy, "reset_peer", timeout=0):
            await anyio.sleep(0.3)
    else:
        with toxiproxy.disabled(proxy):
            await anyio.sleep(0.3)


async def watch_resets(
    bench: FaultBench, *, resets: int = 10, apps: int = 4, per_round: int = 2
) -> ScenarioResult:
    """Cut every connection through the proxy ``resets`` times while new instances start;
    count starts neither delivered nor covered by a ``MISSED`` (or by a lost stream)."""
    result = ScenarioResult("watch connections cut")
    run = bench.run_prefix("cut")
    ids = [bench.new_id(run) for _ in range(apps)]
    async with KubernetesAdapter(bench.settings()) as adapter:
        plans = {i: app_plan(i, 0) for i in ids}
        await _converge(adapter, plans, result)
        log = _EventLog(adapter, ids, result)
        async with anyio.create_task_group() as group:
            await group.start(log.run)
            done = 0
            while done < resets:
                plans = {i: app_plan(i, result.rounds + 1) for i in ids}
                began = time.monotonic()
                async with anyio.create_task_group() as inner:
                    inner.start_soon(_converge, adapter, plans, result)
                    for _ in range(min(per_round, resets - done)):
                        await anyio.sleep(0.2)
                        await _cut(bench, done)
                        done += 1
                result.rounds += 1
                # Every app's new api instance runs; its start must have been heard.
                await _wait_running(adapter, plans, within=60)
                # observe may have read the API while the watch was reconnecting: give the
                # reopened watch its time (a bound; a start is usually heard at once).
                with anyio.move_on_after(15):
                    while not all(log.heard(i, began) for i in ids):  # noqa: ASYNC110
                        await anyio.sleep(0.1)
                result.lost += sum(not log.heard(i, began) for i in ids)
            group.cancel_scope.cancel()
        result.extra["covered"] = len(log.covered)
        result.extra["pod watches opened"] = adapter.session.connection.calls_by_kind.get(
            "STREAM pods", 0
        )
        result.extra["silent ends"] = log.silent_ends
        await _finish(bench, adapter, plans, result)
    return result


async def _wait_running(
    adapter: KubernetesAdapter, plans: dict[str, BundlePlan], *, within: float
) -> None:
    with anyio.fail_after(within):
        for bundle_id in plans:
            while True:
                try:
                    observed = await adapter.observe(BundleRef(bundle_id))
                except PandoRuntimeError:
                    await anyio.sleep(0.2)
                    continue
                if observed.all_running:
                    break
                await anyio.sleep(0.2)


# -- latency and a hanging connection ---------------------------------------------------------


async def latency_and_hang(
    bench: FaultBench, *, rounds: int = 2, latency_ms: int = 500, read_timeout: float = 3.0
) -> ScenarioResult:
    """Latency on every round trip: calls still succeed. A hanging connection (the ``timeout``
    toxic): every call fails within its timeouts, coded; a cancelled call leaves no worker
    thread on a socket once its timeout passed; all recovers when the toxic is removed."""
    result = ScenarioResult("latency, then a hanging connection")
    toxiproxy, proxy = bench.proxy.toxiproxy, bench.proxy.proxy.name
    settings = bench.settings(read_timeout=read_timeout, cache_max_staleness=read_timeout)
    durations: list[float] = []
    stuck = 0
    async with KubernetesAdapter(settings) as adapter:
        transport = await adapter.session.connection.transport()
        bundle_id = bench.new_id(bench.run_prefix("slow"))
        plans = {bundle_id: app_plan(bundle_id, 0)}
        with toxiproxy.toxic(proxy, "latency", latency=latency_ms):
            await _converge(adapter, plans, result)
        for round_number in range(1, rounds + 1):
            plans = {i: app_plan(i, round_number) for i in plans}
            with toxiproxy.toxic(proxy, "timeout", timeout=0):
                began = time.monotonic()
                await _apply_all(adapter, plans.values(), result)
                durations.append(time.monotonic() - began)
                # A host that gives up first: the call is cancelled while its thread waits.
                with anyio.move_on_after(0.5):
                    await adapter.session.api.get("/api/v1/namespaces", "list namespaces")
                hung_until = time.monotonic() + read_timeout + settings["connect_timeout"] + 2
                while transport.in_flight and time.monotonic() < hung_until:  # noqa: ASYNC110
                    await anyio.sleep(0.1)
                stuck = max(stuck, transport.in_flight)
            healed = time.monotonic()
            await _converge(adapter, plans, result)
            result.recovery.append(time.monotonic() - healed)
            result.rounds += 1
        await _finish(bench, adapter, plans, result)
    result.extra["slowest failure s"] = round(max(durations), 2) if durations else None
    result.extra["threads stuck"] = stuck
    return result


# -- throttling: real 429s from API Priority and Fairness -------------------------------------

_PL = "pando-faults-starved"
_FS = "pando-faults-starved"


def _flow_control(bench: FaultBench, user: str, *, create: bool) -> None:
    """A priority level with almost no concurrency and no queue, and a flow schema that sends
    ``user`` there (or their removal)."""
    rest = bench.cluster.rest
    base = "/apis/flowcontrol.apiserver.k8s.io/v1"
    if not create:
        rest.request("DELETE", f"{base}/flowschemas/{_FS}")
        rest.request("DELETE", f"{base}/prioritylevelconfigurations/{_PL}")
        return
    level = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": _PL},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 1,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"},
            },
        },
    }
    schema = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": _FS},
        "spec": {
            "priorityLevelConfiguration": {"name": _PL},
            "matchingPrecedence": 100,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [{"kind": "User", "user": {"name": user}}],
                    "resourceRules": [
                        {
                            "verbs": ["*"],
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "namespaces": ["*"],
                            "clusterScope": True,
                        }
                    ],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }
    for path, body in (
        (f"{base}/prioritylevelconfigurations", level),
        (f"{base}/flowschemas", schema),
    ):
        status, answer = rest.post(path, body)
        if status not in (201, 409):
            raise RuntimeError(f"creating {body['kind']} failed: HTTP {status}: {answer}")


_SAMPLE = re.compile(r"^(?P<name>[a-z_]+)\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$")


def flow_counts(bench: FaultBench, level: str = _PL) -> dict[str, float]:
    """The API server's own counts for one priority level: dispatched and rejected requests."""
    status, text = bench.cluster.rest.request("GET", "/metrics", timeout=30)
    if status != 200 or not isinstance(text, str):
        raise RuntimeError(f"reading the API server's metrics failed: HTTP {status}")
    counts = {"dispatched": 0.0, "rejected": 0.0}
    names = {
        "apiserver_flowcontrol_dispatched_requests_total": "dispatched",
        "apiserver_flowcontrol_rejected_requests_total": "rejected",
    }
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match["name"] not in names:
            continue
        if f'priority_level="{level}"' in match["labels"]:
            counts[names[match["name"]]] += float(match["value"])
    return counts


async def throttled(
    bench: FaultBench, *, apps: int = 12, observes: int = 0, rate_limit_wait: float = 10.0
) -> ScenarioResult:
    """Real 429s: the adapter's identity gets a priority level of about 3 seats and no queue;
    ``apps`` applies at once. Each waits as ``Retry-After`` says or raises ``RateLimited`` with
    it; the server's count of the level's requests equals the adapter's (nothing retried
    behind its back) and every retry waited first."""
    result = ScenarioResult("throttled (429 with Retry-After)")
    user = bench.cluster.restricted_user
    await anyio.to_thread.run_sync(lambda: _flow_control(bench, user, create=True))
    try:
        settings = bench.settings(rate_limit_wait=rate_limit_wait, api_qps=1000, api_burst=1000)
        before = await anyio.to_thread.run_sync(flow_counts, bench)
        async with KubernetesAdapter(settings) as adapter:
            transport = await adapter.session.connection.transport()
            run = bench.run_prefix("busy")
            ids = [bench.new_id(run) for _ in range(apps)]
            plans = {i: app_plan(i, 0) for i in ids}
            began = time.monotonic()
            failed = await _apply_all(adapter, plans.values(), result)
            result.extra["first pass s"] = round(time.monotonic() - began, 2)
            result.extra["throttled applies"] = len(failed)
            result.retries = transport.retries
            after = await anyio.to_thread.run_sync(flow_counts, bench)
            # Every call since the adapter began (its probes too), read after the server's.
            calls = transport.calls + transport.probes
            result.extra["server rejected"] = int(after["rejected"] - before["rejected"])
            result.extra["server saw"] = int(
                after["rejected"] - before["rejected"] + after["dispatched"] - before["dispatched"]
            )
            result.extra["adapter sent"] = calls
            result.rounds = 1
        await anyio.to_thread.run_sync(lambda: _flow_control(bench, user, create=False))
        async with KubernetesAdapter(bench.settings()) as adapter:
            healed = time.monotonic()
            await _converge(adapter, plans, result)
            result.recovery.append(time.monotonic() - healed)
            await _finish(bench, adapter, plans, result)
    finally:
        await anyio.to_thread.run_sync(lambda: _flow_control(bench, user, create=False))
    rate_limited = [e for e in result.errors if e == RateLimited.code]
    result.extra["rate limited"] = sum(result.errors[c] for c in rate_limited)
    return result
