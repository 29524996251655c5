"""Placement over two local control planes, placements in flight counted.

For the spread tests each cluster gets one node of its own, of the same size, that only these
tests' adapters select (``node_selector``): the two clusters have exactly equal room. Their
schedulers are paused during the burst (SIGSTOP), so no pod of it lands on a node before the
last app is placed: every placement is made at the same instant as far as the clusters' room
can tell. Apps applied so used to go all to the cluster that looked roomiest; now each
decision counts the ones before it (this process's reservations) and the pods other replicas
wrote (every replica's cache sees them, waiting for a node).
"""

from __future__ import annotations

import contextlib
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest
from _kube_harness import MEMBERSHIP_SETTINGS, until
from pando_runtime_kubernetes import MultiClusterAdapter
from pando_runtime_kubernetes._names import ANN_FENCE, namespace_for

import pando_runtime as pr

pytestmark = [pytest.mark.kube, pytest.mark.anyio]

MiB = 1024**2
POOL_LABEL = "pando-runtime-tests/placement"
APPS = 20


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _plan(bundle_id: str, memory: int = 128 * MiB) -> pr.BundlePlan:
    web = pr.WorkloadPlan(
        name="web",
        image="registry.example/placement/app:1",
        resources=pr.Resources(cpu_millis=100, memory_bytes=memory),
    )
    return pr.BundlePlan(bundle_id=bundle_id, workloads=(web,), first_deploy=True)


@pytest.fixture(scope="module")
def equal_pool(
    kube_cluster: Any, second_kube_cluster: Any, admin_api: Any, second_admin_api: Any
) -> Iterator[str]:
    """One node of 4 CPU and 8Gi in each cluster, labelled with a pool only these tests use."""
    from kubernetes import client  # noqa: PLC0415

    if kube_cluster.local is None:
        pytest.skip("the backend cannot add nodes (local only)")
    pool = f"p{uuid.uuid4().hex[:8]}"
    name = f"placement-{pool}"
    added = []
    try:
        for cluster, api in ((kube_cluster, admin_api), (second_kube_cluster, second_admin_api)):
            spec = cluster.local.add_node(name, 4, "8Gi", labels={POOL_LABEL: pool})
            added.append((cluster.local, spec, api))
        yield pool
    finally:
        for local, spec, api in added:
            client.CoreV1Api(api).delete_node(name)
            local.nodes.remove(spec)  # a restarted control plane waits for its nodes only


@pytest.fixture
async def emptied_pool(equal_pool: str, admin_api: Any, second_admin_api: Any) -> str:
    """The equal pool once no pod is left on either of its nodes.

    The tests destroy their apps at the end, but a destroyed app's pods stay on their node
    until they are gone; on a busy machine the next test started while one cluster still
    held some, so the two clusters' room was not equal and placement rightly favoured the
    other (14 against 6). Waited for here, pod by pod: the count must keep falling.
    """
    from kubernetes import client  # noqa: PLC0415

    selector = f"spec.nodeName=placement-{equal_pool}"

    def left() -> int:
        return sum(
            len(client.CoreV1Api(api).list_pod_for_all_namespaces(field_selector=selector).items)
            for api in (admin_api, second_admin_api)
        )

    fewest = await anyio.to_thread.run_sync(left)
    quiet_since = anyio.current_time()
    while fewest:
        await anyio.sleep(0.2)
        now_left = await anyio.to_thread.run_sync(left)
        if now_left < fewest:
            fewest, quiet_since = now_left, anyio.current_time()
        assert anyio.current_time() - quiet_since < 60, f"{fewest} pods stay on the pool"
    return equal_pool


@pytest.fixture
def equal_config(multi_config: dict[str, Any], emptied_pool: str) -> dict[str, Any]:
    """:func:`multi_config` placing apps on the equal pool's nodes only, once they are empty;
    apply does not wait for a pod to be scheduled (the schedulers are paused)."""
    pool = {"node_selector": {POOL_LABEL: emptied_pool}, "schedule_wait": 0}
    return {**multi_config, "settings": {**multi_config["settings"], **pool}}


@pytest.fixture
def schedulers_paused(kube_cluster: Any, second_kube_cluster: Any) -> Any:
    """A context manager: both clusters' schedulers paused for its block."""

    @contextlib.contextmanager
    def paused() -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for cluster in (kube_cluster, second_kube_cluster):
                stack.enter_context(cluster.local.paused("kube-scheduler"))
            yield

    return paused


@contextlib.asynccontextmanager
async def _cleaned(config: dict[str, Any], plans: list[pr.BundlePlan]) -> AsyncIterator[None]:
    """Destroy ``plans``' bundles after the block, through an adapter that joined nothing."""
    try:
        yield
    finally:
        async with MultiClusterAdapter(config) as cleaner, anyio.create_task_group() as group:
            for plan in plans:
                group.start_soon(cleaner.destroy, pr.BundleRef(plan.bundle_id))


async def _where(fleet: MultiClusterAdapter, plans: list[pr.BundlePlan]) -> Counter[str]:
    """How many of ``plans`` each cluster holds."""
    return Counter([str(await fleet.locate(p.bundle_id)) for p in plans])


async def test_apps_applied_at_once_spread_over_two_clusters_of_equal_room(
    equal_config: dict[str, Any], schedulers_paused: Any
) -> None:
    plans = [_plan(f"burst-{uuid.uuid4().hex[:8]}") for _ in range(APPS)]
    async with _cleaned(equal_config, plans), MultiClusterAdapter(equal_config) as fleet:
        with schedulers_paused():
            async with anyio.create_task_group() as group:
                for plan in plans:
                    group.start_soon(fleet.apply, plan)
        where = await _where(fleet, plans)
        assert set(where) == set(fleet.members), where
        assert abs(where.most_common()[0][1] - where.most_common()[-1][1]) <= 2, where
        # Every placement is counted by its cluster's own view now: nothing is held any more.
        await until(lambda: not fleet.placements_in_flight)


async def test_in_a_read_scope_a_placement_that_landed_since_the_room_was_read_still_counts(
    equal_config: dict[str, Any],
) -> None:
    """The scope reads each cluster's room once, before a big app lands on one of them; the
    burst applied after it, in the same scope, balances the clusters' memory around it."""
    big = _plan(f"scoped-big-{uuid.uuid4().hex[:8]}", memory=2048 * MiB)
    plans = [_plan(f"scoped-{uuid.uuid4().hex[:8]}") for _ in range(APPS)]
    async with (
        _cleaned(equal_config, [big, *plans]),
        MultiClusterAdapter(equal_config) as fleet,
        fleet.read_scope(),
    ):
        home = (await fleet.apply(big)).details["cluster"]
        with anyio.fail_after(30):  # on a node now: counted by no room read in this scope
            while True:
                if (await fleet.observe(pr.BundleRef(big.bundle_id))).all_running:
                    break
                await anyio.sleep(0.1)
        async with anyio.create_task_group() as group:
            for plan in plans:
                group.start_soon(fleet.apply, plan)
        memory = Counter(dict.fromkeys(fleet.members, 0))
        memory[home] += 2048
        for plan in plans:
            memory[str(await fleet.locate(plan.bundle_id))] += 128
        assert abs(memory[home] - sum(memory.values()) / 2) <= 128, memory  # in MiB


async def test_two_replicas_placing_at_once_spread_too(
    equal_config: dict[str, Any],
    schedulers_paused: Any,
    admin_api: Any,
    second_admin_api: Any,
) -> None:
    """Each replica applies the new apps it owns, all at once, at the same instant as the other."""
    run = uuid.uuid4().hex[:6]
    names = {f"place-{run}-a", f"place-{run}-b"}
    plans = [_plan(f"pair-{run}-{i}") for i in range(APPS)]
    async with (
        _cleaned(equal_config, plans),
        MultiClusterAdapter(equal_config) as a,
        MultiClusterAdapter(equal_config) as b,
        a.membership(f"place-{run}-a", MEMBERSHIP_SETTINGS) as ma,
        b.membership(f"place-{run}-b", MEMBERSHIP_SETTINGS) as mb,
    ):
        ids = [p.bundle_id for p in plans]
        await until(  # joined, and every bundle owned by exactly one (drained)
            lambda: (
                ma.members() == mb.members() == names and all(ma.owns(i) != mb.owns(i) for i in ids)
            )
        )
        by_a = [p for p in plans if ma.owns(p.bundle_id)]
        by_b = [p for p in plans if mb.owns(p.bundle_id)]
        assert by_a, "both replicas place some"
        assert by_b, "both replicas place some"
        with pytest.raises(pr.NotOwner):  # refused before it is placed
            await a.apply(by_b[0])
        for member in a.members.values():  # the one membership guards every cluster's writes
            with pytest.raises(pr.NotOwner):
                await member.apply(by_b[0])
        with schedulers_paused():
            async with anyio.create_task_group() as group:
                for fleet, owned in ((a, by_a), (b, by_b)):
                    for plan in owned:
                        group.start_soon(fleet.apply, plan)
        where = await _where(a, plans)
        assert set(where) == set(a.members), where
        assert abs(where.most_common()[0][1] - where.most_common()[-1][1]) <= 4, where
        # Each member cluster fences the writes of the apps it holds: the app's namespace there
        # carries its owner's stamp (deploy/admission.yaml refuses a write under another).
        from kubernetes import client  # noqa: PLC0415

        admins = dict(zip(equal_config["contexts"], (admin_api, second_admin_api), strict=True))
        for fleet, owned, replica in ((a, by_a, ma.replica), (b, by_b, mb.replica)):
            for plan in owned:
                cluster = str(await fleet.locate(plan.bundle_id))
                namespace = await anyio.to_thread.run_sync(
                    client.CoreV1Api(admins[cluster]).read_namespace,
                    namespace_for(plan.bundle_id),
                )
                stamp = namespace.metadata.annotations[ANN_FENCE]
                assert stamp.endswith(f"/{replica}"), (plan.bundle_id, cluster, stamp)


async def test_a_placement_whose_apply_fails_releases_its_reservation(
    multi_config: dict[str, Any],
) -> None:
    """The first cluster (the only one with nodes to take it) refuses the app's pods."""
    first, second = multi_config["contexts"]
    broken = {**multi_config["clusters"][first], "runtime_class": f"missing-{uuid.uuid4().hex}"}
    # No node of the second cluster is eligible (another test's pool may have left a node big
    # enough there, and a tie would then go either way).
    none = {**multi_config["clusters"].get(second, {}), "node_selector": {"pando-test/none": "x"}}
    clusters = {**multi_config["clusters"], first: broken, second: none}
    config = {**multi_config, "clusters": clusters}
    big = _plan(f"fails-{uuid.uuid4().hex[:8]}", memory=5 * 1024 * MiB)  # 8Gi nodes only
    async with _cleaned(multi_config, [big]), MultiClusterAdapter(config) as fleet:
        with pytest.raises(pr.PandoRuntimeError):
            await fleet.apply(big)
        assert big.bundle_id not in fleet.placements_in_flight, "released, not held for 60 s"
        assert await fleet.locate(big.bundle_id) in (first, None), "it was placed on the first"
