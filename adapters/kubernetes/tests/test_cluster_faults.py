"""Faults on a control plane of this module's own: a hung, killed or throttled API server, etcd
restarted, watch connections cut, a slow or hanging network (Toxiproxy in front of the API
server). What each proves is in docs/reliability.md; ``benchmarks/faults.py`` runs the same
scenarios at a larger count and prints the figures.

The scenarios live in ``tests/support/faultbench`` (shared with the benchmark); each test runs
one at a small, bounded count and asserts what it promises.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import anyio
import pytest
from faultbench import (
    FaultBench,
    ScenarioResult,
    app_plan,
    component_restarted,
    latency_and_hang,
    throttled,
    watch_resets,
)
from localcluster import LocalCluster, ProxiedApiServer, ToxiproxyServer, proxy_apiserver
from pando_runtime_kubernetes import KubernetesAdapter

from pando_runtime import AdapterFailed, AdapterUnavailable, BundleRef

pytestmark = [pytest.mark.kube, pytest.mark.anyio]


@pytest.fixture(scope="module")
def fault_cluster() -> Iterator[LocalCluster]:
    """A control plane for this module alone: its tests kill and hang its components."""
    with LocalCluster() as cluster:
        yield cluster


@pytest.fixture(scope="module")
def fault_proxy(fault_cluster: LocalCluster) -> Iterator[ProxiedApiServer]:
    with ToxiproxyServer(log_dir=fault_cluster.logs_dir) as server:
        yield proxy_apiserver(fault_cluster, server)


@pytest.fixture(scope="module")
def bench(fault_cluster: LocalCluster, fault_proxy: ProxiedApiServer) -> Iterator[FaultBench]:
    with FaultBench(fault_cluster, fault_proxy) as made:
        yield made


@pytest.fixture(autouse=True)
def _healthy(bench: FaultBench) -> Iterator[None]:
    """Every test starts and leaves with every component up and no toxic."""
    bench.heal()
    yield
    bench.heal()


async def test_observe_reports_a_stale_cache_then_refuses_it(bench: FaultBench) -> None:
    settings = bench.settings(cache_max_staleness=3.0)
    async with KubernetesAdapter(settings) as adapter:
        plan = app_plan(bench.new_id("stale"))
        ref = BundleRef(plan.bundle_id)
        await adapter.apply(plan)
        before = await adapter.observe(ref)
        assert before.confirmed_at is not None
        assert before.exists
        answers = []
        with bench.cluster.paused("kube-apiserver"):
            paused_at = datetime.now(UTC)
            with anyio.fail_after(40):  # a bound, not a measurement
                while True:
                    try:
                        answers.append(await adapter.observe(ref))
                    except AdapterUnavailable as error:
                        # A direct read that timed out may come first; then the cache's refusal.
                        if "confirmed_at" in error.details:
                            refused = error
                            break
                    await anyio.sleep(0.2)
            # Writes fail too, with a code, instead of hanging.
            during = app_plan(bench.new_id("stale"))
            with pytest.raises((AdapterUnavailable, AdapterFailed)):
                await adapter.apply(during)
        resumed_at = datetime.now(UTC)
        # While it answered, it said the answer was confirmed no later than the hang began.
        assert answers, "observe answered from the cache within its bound"
        for answer in answers:
            assert answer.confirmed_at is not None
            assert answer.confirmed_at <= paused_at + timedelta(seconds=1)
        assert refused.code == "ADAPTER_UNAVAILABLE"
        assert datetime.fromisoformat(refused.details["confirmed_at"]) <= paused_at + timedelta(
            seconds=1
        )
        # Refused once past the bound; the detail is rounded to a tenth, so 3.04 reads 3.0.
        assert refused.details["stale_for"] >= 3.0
        # Once the server answers again, so does observe, confirmed after the hang.
        with anyio.fail_after(60):
            while True:
                try:
                    after = await adapter.observe(ref)
                except AdapterUnavailable:
                    await anyio.sleep(0.2)
                    continue
                assert after.confirmed_at is not None
                if after.confirmed_at >= resumed_at - timedelta(seconds=1):
                    break
                await anyio.sleep(0.2)
        assert after.exists
        await adapter.destroy(ref)
        await adapter.destroy(BundleRef(during.bundle_id))  # whatever of it was written


CODES = {"ADAPTER_UNAVAILABLE", "ADAPTER_FAILED"}


def _converged(result: ScenarioResult) -> None:
    """What every scenario promises at its end."""
    assert result.uncoded == 0, result.errors
    assert result.duplicates == 0
    assert result.orphans == 0
    assert result.extra["disagreements"] == 0  # observe agrees with the cluster


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
async def test_component_killed_mid_apply(bench: FaultBench, component: str) -> None:
    result = await component_restarted(bench, component=component, rounds=2, apps=6)
    assert result.rounds == 2
    assert set(result.errors) <= CODES, result.errors
    _converged(result)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_watch_connections_cut(bench: FaultBench) -> None:
    result = await watch_resets(bench, resets=6, apps=3)
    assert result.lost == 0
    assert result.extra["silent ends"] == 0  # a stream ends with an error, never silently
    # The cuts reached the watch: it was reopened (from its last version: nothing was missed,
    # or a MISSED said so) more often than once.
    assert result.extra["pod watches opened"] > 2
    assert set(result.errors) <= CODES, result.errors
    _converged(result)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_latency_and_a_hanging_connection(bench: FaultBench) -> None:
    result = await latency_and_hang(bench, rounds=1, read_timeout=3.0)
    assert result.errors, "calls through a hanging connection fail"
    assert set(result.errors) <= CODES, result.errors
    assert result.extra["threads stuck"] == 0
    _converged(result)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_throttled_by_priority_and_fairness(bench: FaultBench) -> None:
    result = await throttled(bench, apps=20)
    assert result.extra["server rejected"] > 0, "the priority level rejected requests"
    assert result.retries > 0  # the adapter waited as Retry-After said and sent again
    assert set(result.errors) <= {"RATE_LIMITED"}, result.errors
    # Nothing retried behind the adapter's back: the server saw what the adapter sent.
    assert result.extra["server saw"] <= result.extra["adapter sent"]
    _converged(result)
