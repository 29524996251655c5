"""The multi-cluster adapter on two local control planes running at once.

The first cluster (``kube_cluster``, nodes of 4 CPU and 8Gi) is shared with the rest of the
session; the second (``second_kube_cluster``, nodes of 2 CPU and 4Gi) is the default cluster of
``multi_config`` and the one these tests stop and start again. Shown here: placement by room,
recorded on the clusters (a second adapter and a restarted one find it), a bundle never moves, a
bundle that is not a first deploy goes to the default cluster; the merged event stream; a member
stopped (its bundles unavailable, naming it, the other's applied and observed, ``health_check``
naming it) and started again with the same data and ports (the same adapter recovers).

The merged event stream runs on asyncio and trio (streams are where the backends differ); the
rest is the same code on either, and runs on asyncio.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import attrs
import pytest
from pando_runtime_kubernetes._multi import MultiClusterAdapter
from pando_runtime_kubernetes._names import namespace_for

from pando_runtime import (
    AdapterUnavailable,
    BundleEvent,
    BundleEventKind,
    BundlePlan,
    BundleRef,
    DestroyOptions,
    ObservedBundle,
    Resources,
    WorkloadPlan,
)

pytestmark = pytest.mark.kube

T = TypeVar("T")
MiB = 1024**2
BIG = 5 * 1024 * MiB
"""A workload that only the first cluster's nodes (8Gi) hold; the second's have 4Gi."""
WAIT = 90.0


def _plan(prefix: str, *, memory: int = 64 * MiB, first_deploy: bool = False) -> BundlePlan:
    web = WorkloadPlan(
        name="web",
        image="registry.example/multi/app:1",
        resources=Resources(cpu_millis=50, memory_bytes=memory),
    )
    bundle_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    return BundlePlan(bundle_id=bundle_id, workloads=(web,), first_deploy=first_deploy)


async def _eventually(check: Callable[[], Awaitable[T | None]], what: str) -> T:
    """Poll ``check`` until it returns something; fail saying ``what`` did not happen."""
    last: object = None
    with anyio.move_on_after(WAIT):
        while True:
            try:
                result = await check()
            except AdapterUnavailable as error:  # a member still coming back
                last = error
            else:
                if result is not None:
                    return result
                last = result
            await anyio.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}; last seen: {last!r}")


async def _running(adapter: MultiClusterAdapter, plan: BundlePlan) -> ObservedBundle:
    async def check() -> ObservedBundle | None:
        observed = await adapter.observe(BundleRef(plan.bundle_id))
        return observed if observed.all_running else None

    return await _eventually(check, f"{plan.bundle_id} to run")


def _namespaces(admin_api: Any) -> set[str]:
    from kubernetes import client  # noqa: PLC0415

    return {n.metadata.name for n in client.CoreV1Api(admin_api).list_namespace().items}


async def _destroy(config: dict[str, Any], plans: list[BundlePlan]) -> None:
    async with MultiClusterAdapter(config) as adapter:
        for plan in plans:
            await adapter.destroy(BundleRef(plan.bundle_id), DestroyOptions(keep_volumes=False))


@pytest.fixture
async def made(multi_config: dict[str, Any]) -> AsyncIterator[list[BundlePlan]]:
    """Plans a test applied; destroyed at its end by an adapter of its own."""
    plans: list[BundlePlan] = []
    yield plans
    await _destroy(multi_config, plans)


@pytest.fixture
async def made_and_gone(
    multi_config: dict[str, Any], admin_api: Any, second_admin_api: Any
) -> AsyncIterator[list[BundlePlan]]:
    """The same, and gone (pods and all) before the next test: its placement by room must not
    count what this test placed."""
    plans: list[BundlePlan] = []
    yield plans
    await _destroy(multi_config, plans)
    ours = {namespace_for(p.bundle_id) for p in plans}

    async def gone() -> bool | None:
        for api in (admin_api, second_admin_api):
            if ours & await anyio.to_thread.run_sync(_namespaces, api):
                return None
        return True

    await _eventually(gone, "the test's namespaces to be gone")


ASYNCIO_ONLY = pytest.mark.parametrize("anyio_backend", ["asyncio"])
"""Placement, a member's outage and a warm restart are the same code on either backend."""


@pytest.mark.anyio
@ASYNCIO_ONLY
async def test_placement_by_room_is_recorded_on_the_clusters(
    multi_config: dict[str, Any],
    admin_api: Any,
    second_admin_api: Any,
    made_and_gone: list[BundlePlan],
) -> None:
    made = made_and_gone
    first, second = multi_config["contexts"]
    big = _plan("big", memory=BIG, first_deploy=True)
    roomy = _plan("roomy", first_deploy=True)
    plain = _plan("plain")
    made.extend((big, roomy, plain))
    async with MultiClusterAdapter(multi_config) as fleet:
        assert fleet.default_cluster == second
        assert (await fleet.apply(big)).details["cluster"] == first, "only the first holds it"
        assert (await fleet.apply(roomy)).details["cluster"] == first, "the first has more room"
        assert (await fleet.apply(plain)).details["cluster"] == second, "not a first deploy"
        # A bundle never moves: a first deploy of one that exists stays where it is.
        again = attrs.evolve(plain, first_deploy=True)
        assert (await fleet.apply(again)).details["cluster"] == second
        for plan in (big, roomy, plain):
            await _running(fleet, plan)
        # A placed bundle's fit is its own cluster's (it never moves); a new one's, the fleet's.
        async with fleet.read_scope():
            own = await fleet.largest_fit_for(plain.bundle_id)
            assert own == await fleet.members[second].largest_fit_for(plain.bundle_id)
            fits = [await m.largest_fit_for("nowhere") for m in fleet.members.values()]
            roomiest = max((f for f in fits if f), key=lambda f: (f.memory_bytes, f.cpu_millis))
            assert await fleet.largest_fit_for("nowhere") == roomiest
    # The placement is each bundle's namespace, on its cluster and only there.
    on_first = await anyio.to_thread.run_sync(_namespaces, admin_api)
    on_second = await anyio.to_thread.run_sync(_namespaces, second_admin_api)
    for plan, home, away in ((big, on_first, on_second), (plain, on_second, on_first)):
        assert namespace_for(plan.bundle_id) in home
        assert namespace_for(plan.bundle_id) not in away
    # A restarted adapter and, at the same time, a second one whose default is the first
    # cluster (another host process) find every bundle where it was placed.
    other = {**multi_config, "default_cluster": first}
    async with MultiClusterAdapter(multi_config) as restarted, MultiClusterAdapter(other) as peer:
        for adapter in (restarted, peer):
            assert await adapter.locate(big.bundle_id) == first
            assert await adapter.locate(plain.bundle_id) == second
            assert (await adapter.apply(plain)).details["cluster"] == second
            assert (await adapter.observe(BundleRef(roomy.bundle_id))).all_running
        # Found, not placed again: no member's nodes are read (placement reads them).
        assert (await restarted.apply(big)).details["cluster"] == first
        for member in restarted.members.values():
            assert "GET nodes" not in member.session.connection.calls_by_kind
        # Unknown and not a first deploy: the default cluster of each adapter.
        unknown = _plan("unknown")
        made.append(unknown)
        assert (await peer.apply(unknown)).details["cluster"] == first


async def _next(events: AsyncIterator[Any], kind: BundleEventKind) -> BundleEvent:
    with anyio.fail_after(WAIT):
        async for event in events:
            if isinstance(event, BundleEvent) and event.kind is kind:
                return event
    pytest.fail("the event stream ended")


@pytest.mark.anyio
async def test_one_event_stream_carries_every_member(
    multi_config: dict[str, Any], made: list[BundlePlan]
) -> None:
    first, second = multi_config["contexts"]
    there = _plan("watched-first")
    plain = _plan("watched")
    made.extend((there, plain))
    async with (
        MultiClusterAdapter(multi_config) as fleet,
        MultiClusterAdapter({**multi_config, "default_cluster": first}) as peer,
        fleet.watch_bundles() as events,
    ):
        with anyio.fail_after(WAIT):
            opened = await anext(events)
        assert opened.kind is BundleEventKind.WATCHING, "WATCHING once every member's is open"
        assert (await peer.apply(there)).details["cluster"] == first
        assert (await fleet.apply(plain)).details["cluster"] == second
        started: set[str] = set()
        while started != {there.bundle_id, plain.bundle_id}:
            event = await _next(events, BundleEventKind.STARTED)
            started.add(str(event.bundle_id))
        fleet.members[first].session.cache.force_relist()  # a gap in one member's stream
        missed = await _next(events, BundleEventKind.MISSED)
        assert missed.bundle_id is None


@pytest.mark.anyio
@ASYNCIO_ONLY
async def test_a_member_down_then_back(
    multi_config: dict[str, Any], second_kube_cluster: Any, made: list[BundlePlan]
) -> None:
    local = second_kube_cluster.local
    assert local is not None, "the second cluster is always the local control plane"
    first, second = multi_config["contexts"]
    there = _plan("stays-up")
    down = _plan("goes-down")
    made.extend((there, down))
    # One bundle on each cluster: each is the default cluster of the adapter that applies it.
    async with MultiClusterAdapter({**multi_config, "default_cluster": first}) as peer:
        assert (await peer.apply(there)).details["cluster"] == first
    async with MultiClusterAdapter(multi_config) as fleet:
        assert (await fleet.apply(there)).details["cluster"] == first, "found, not placed"
        assert (await fleet.apply(down)).details["cluster"] == second
        await _running(fleet, there)
        await _running(fleet, down)
        await anyio.to_thread.run_sync(local.stop_components)
        try:

            async def unavailable() -> AdapterUnavailable | None:
                try:
                    await fleet.observe(BundleRef(down.bundle_id))
                except AdapterUnavailable as error:
                    return error
                return None

            error = await _eventually(unavailable, f"{second} to be seen down")
            assert error.details["cluster"] == second
            assert second in error.message
            # The other member's bundles are applied (a changed plan) and observed.
            changed = attrs.evolve(
                there, workloads=(attrs.evolve(there.workloads[0], env={"STEP": "2"}),)
            )
            assert (await fleet.apply(changed)).details["cluster"] == first
            assert (await _running(fleet, changed)).exists
            with pytest.raises(AdapterUnavailable) as caught:
                await fleet.health_check()
            assert caught.value.details["cluster"] == second
            # A bundle found nowhere may be on the member that cannot answer: never absent.
            with pytest.raises(AdapterUnavailable) as caught:
                await fleet.observe(BundleRef(_plan("nowhere").bundle_id))
            assert caught.value.details["cluster"] == second
        finally:
            await anyio.to_thread.run_sync(local.start_components)

        # The same adapter recovers: its member's watches reconnect and its cache syncs.
        async def healthy() -> bool:
            await fleet.health_check()
            return True

        await _eventually(healthy, f"{second} to be healthy again")
        assert (await _running(fleet, down)).exists
        assert (await fleet.apply(down)).details["cluster"] == second


@pytest.mark.anyio
@ASYNCIO_ONLY
async def test_a_warm_restart_of_the_fleet_resumes_every_member(
    multi_config: dict[str, Any], made: list[BundlePlan], tmp_path: Any
) -> None:
    """With ``cache_dir``, each member keeps its own store and resumes from it: no member
    lists, and what changed on either cluster while the fleet was down is reported."""
    first, second = multi_config["contexts"]
    cached = {**multi_config, "settings": {**multi_config["settings"], "cache_dir": str(tmp_path)}}
    kept, gone, new = _plan("warm-kept"), _plan("warm-gone"), _plan("warm-new")
    made.extend((kept, gone, new))
    peer_config = {**multi_config, "default_cluster": first}
    async with MultiClusterAdapter(cached) as fleet:
        assert (await fleet.apply(kept)).details["cluster"] == second
        await _running(fleet, kept)
    async with MultiClusterAdapter(peer_config) as peer:
        assert (await peer.apply(gone)).details["cluster"] == first
        await _running(peer, gone)
    async with MultiClusterAdapter(cached) as fleet:
        await _running(fleet, gone)  # the store now holds both clusters' apps
    # While the fleet is down: an app removed from the first cluster, one made on the second.
    async with MultiClusterAdapter(multi_config) as other:
        await other.destroy(BundleRef(gone.bundle_id), DestroyOptions(keep_volumes=False))
        assert (await other.apply(new)).details["cluster"] == second
        await _running(other, new)
    assert sorted(p.name for p in tmp_path.glob("cache-*.sqlite")) == sorted(
        f"cache-{name}.sqlite" for name in (first, second)
    ), "one store per member"
    async with MultiClusterAdapter(cached) as fleet, fleet.watch_bundles() as events:
        want = {(BundleEventKind.REMOVED, gone.bundle_id), (BundleEventKind.STARTED, new.bundle_id)}
        seen: list[BundleEvent] = []
        with anyio.fail_after(WAIT):
            async for event in events:
                seen.append(event)
                want.discard((event.kind, event.bundle_id))
                if not want:
                    break
        assert BundleEventKind.MISSED not in {e.kind for e in seen}
        details = fleet.health_details()
        for name in (first, second):
            assert details[f"{name}.cache_start"] == "warm", details
            calls = fleet.members[name].session.connection.calls_by_kind
            assert calls.get("GET pods", 0) == 0, f"{name} listed its pods: {calls}"
        assert (await fleet.observe(BundleRef(kept.bundle_id))).all_running
        assert (await fleet.observe(BundleRef(new.bundle_id))).all_running
