"""The catalog syncer on the in-memory backend, and the bundle source on the fake adapter."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import anyio
import pytest

import pando_runtime as pr
from pando_runtime.testing import FakeAdapter, MemoryCatalog

pytestmark = pytest.mark.anyio

OWNER = pr.catalog.CATALOG_OWNER_TAG
NODE = pr.catalog.CATALOG_NODE


def _reg(
    n: int, *, node: str = NODE, port: int = 8000, **kw: object
) -> pr.catalog.CatalogRegistration:
    fields: dict[str, object] = {
        "service": f"svc-{n}",
        "service_id": f"svc-{n}-0",
        "address": f"10.0.0.{n}",
        "port": port,
        "node": node,
    }
    fields.update(kw)
    return pr.catalog.CatalogRegistration(**fields)  # type: ignore[arg-type]


def _owned(reg: pr.catalog.CatalogRegistration) -> pr.catalog.CatalogRegistration:
    return pr.catalog.CatalogRegistration(
        service=reg.service,
        service_id=reg.service_id,
        address=reg.address,
        port=reg.port,
        tags=(*reg.tags, OWNER),
        metadata=reg.metadata,
        node=reg.node,
    )


async def _until(syncer: pr.catalog.CatalogSyncer, check: Callable[[], bool]) -> None:
    """Wait for passes of the syncer until ``check`` holds (a guard bounds a hang)."""
    with anyio.fail_after(20):
        while not check():
            await syncer.wait_pass()


@pytest.fixture
def catalog() -> MemoryCatalog:
    return MemoryCatalog()


@pytest.fixture
async def syncer(catalog: MemoryCatalog) -> AsyncIterator[pr.catalog.CatalogSyncer]:
    changes: list[pr.catalog.SyncChange] = []
    syncer = pr.catalog.CatalogSyncer(
        catalog, resync_interval=3600, reap_interval=3600, on_change=changes.append
    )
    syncer.changes = changes  # type: ignore[attr-defined]
    async with syncer.running():
        yield syncer


async def test_registers_the_desired_set_with_the_owner_tag(
    catalog: MemoryCatalog, syncer: pr.catalog.CatalogSyncer
) -> None:
    await syncer.sync([_reg(1), _reg(2, tags=("web",), metadata={"team": "a"})])
    await syncer.wait_applied()
    assert set(catalog.registrations) == {
        (NODE, "svc-1-0"),
        (NODE, "svc-2-0"),
    }
    second = catalog.registrations[(NODE, "svc-2-0")]
    assert second.tags == ("web", OWNER)
    assert second.metadata == {"team": "a"}
    assert catalog.calls["register"] == 2
    kinds = [c.kind for c in syncer.changes]  # type: ignore[attr-defined]
    assert kinds == [pr.catalog.SyncChangeKind.REGISTERED] * 2
    assert syncer.status.healthy
    assert syncer.status.owned == 2


async def test_changes_follow_and_a_removed_registration_is_deregistered_at_once(
    catalog: MemoryCatalog, syncer: pr.catalog.CatalogSyncer
) -> None:
    await syncer.sync([_reg(1), _reg(2)])
    await syncer.wait_applied()
    await syncer.sync([_reg(1, port=9000)])
    await syncer.wait_applied()
    assert catalog.registrations[(NODE, "svc-1-0")].port == 9000
    assert (NODE, "svc-2-0") not in catalog.registrations
    assert catalog.calls["register"] == 3
    assert catalog.calls["deregister"] == 1


async def test_nothing_is_written_or_removed_before_the_first_desired_set(
    catalog: MemoryCatalog,
) -> None:
    stale = _owned(_reg(7))
    catalog.put(stale)
    syncer = pr.catalog.CatalogSyncer(catalog, resync_interval=0.01, reap_interval=0)
    async with syncer.running():
        await anyio.wait_all_tasks_blocked()
        assert catalog.calls == {}
        assert not syncer.status.desired_known
        assert catalog.registrations == {stale.key: stale}
        await syncer.sync([])
        await syncer.wait_full_sync()
    assert catalog.registrations == {}


async def test_a_restart_with_a_full_catalog_deregisters_and_rewrites_nothing_desired(
    catalog: MemoryCatalog,
) -> None:
    desired = [_reg(n) for n in range(1, 6)]
    first = pr.catalog.CatalogSyncer(catalog)
    async with first.running():
        await first.sync(desired)
        await first.wait_applied()
    catalog.calls.clear()
    second = pr.catalog.CatalogSyncer(catalog, resync_interval=0.01, reap_interval=0)
    async with second.running():
        await second.sync(desired)
        await second.wait_full_sync()
        await second.wait_full_sync()  # a reaping pass too
    assert catalog.calls["deregister"] == 0
    assert catalog.calls["register"] == 0
    assert len(catalog.registrations) == 5


async def test_an_external_edit_is_overwritten_at_the_next_full_sync(
    catalog: MemoryCatalog, syncer: pr.catalog.CatalogSyncer
) -> None:
    await syncer.sync([_reg(1)])
    await syncer.wait_applied()
    edited = _owned(_reg(1, address="192.0.2.1"))
    catalog.put(edited)
    await syncer.wait_full_sync()
    assert catalog.registrations[edited.key].address == "10.0.0.1"
    assert pr.catalog.SyncChangeKind.UPDATED in [c.kind for c in syncer.changes]  # type: ignore[attr-defined]


async def test_registrations_of_others_are_never_touched(
    catalog: MemoryCatalog, syncer: pr.catalog.CatalogSyncer
) -> None:
    theirs = _reg(3, tags=("other-tool",))
    same_key = _reg(4, address="192.0.2.4")
    catalog.put(theirs)
    catalog.put(same_key)
    await syncer.sync([_reg(4), _reg(5)])
    await syncer.wait_full_sync()
    await syncer.sync([])
    await syncer.wait_applied()
    syncer.reap_interval = 0
    await syncer.wait_full_sync()
    assert catalog.registrations == {theirs.key: theirs, same_key.key: same_key}
    conflicts = [c for c in syncer.changes if c.kind == pr.catalog.SyncChangeKind.CONFLICT]  # type: ignore[attr-defined]
    assert [c.service_id for c in conflicts] == ["svc-4-0"]
    assert syncer.status.conflicts == 1


async def test_stale_owned_registrations_are_reaped_only_on_a_reaping_pass(
    catalog: MemoryCatalog, syncer: pr.catalog.CatalogSyncer
) -> None:
    await syncer.sync([_reg(1)])
    await syncer.wait_full_sync()
    stale = _owned(_reg(9))  # left by an earlier run: this syncer did not write it
    catalog.put(stale)
    await syncer.wait_full_sync()
    assert stale.key in catalog.registrations, "no reap before reap_interval"
    syncer.reap_interval = 0
    await syncer.wait_full_sync()  # the reap is due from the end of the pass before
    await syncer.wait_full_sync()
    assert stale.key not in catalog.registrations
    assert set(catalog.registrations) == {_reg(1).key}


async def test_an_unreachable_catalog_is_retried_and_reported_and_the_set_kept(
    catalog: MemoryCatalog,
) -> None:
    syncer = pr.catalog.CatalogSyncer(catalog, backoff_initial=0.01)
    async with syncer.running():
        catalog.down = True
        await syncer.sync([_reg(1), _reg(2)])
        await _until(syncer, lambda: syncer.status.last_error is not None)
        status = syncer.status
        assert not status.healthy
        assert "down" in (status.last_error or "")
        assert status.desired == 2
        assert catalog.registrations == {}
        catalog.down = False
        await syncer.wait_applied()
    assert len(catalog.registrations) == 2
    assert syncer.status.healthy


async def test_bad_input_is_a_coded_error_naming_each_problem_and_keeps_the_set(
    catalog: MemoryCatalog, syncer: pr.catalog.CatalogSyncer
) -> None:
    await syncer.sync([_reg(1)])
    await syncer.wait_applied()
    with pytest.raises(pr.InvalidInput) as caught:
        await syncer.sync([_reg(2), _reg(2), _reg(3, port=0, service="")])
    error = caught.value
    assert error.code == "INVALID_INPUT"
    paths = {p.path for p in error.problems}
    assert paths == {
        "registrations[1].service_id",
        "registrations[2].port",
        "registrations[2].service",
    }
    assert syncer.status.desired == 1
    await syncer.wait_full_sync()
    assert set(catalog.registrations) == {_reg(1).key}


async def test_cleanup_removes_what_it_owns_and_nothing_else(
    catalog: MemoryCatalog, syncer: pr.catalog.CatalogSyncer
) -> None:
    theirs = _reg(3, tags=("other-tool",))
    catalog.put(theirs)
    await syncer.sync([_reg(1), _reg(2)])
    await syncer.wait_applied()
    catalog.put(_owned(_reg(8)))  # an earlier run's, not seen by any pass yet
    removed = await syncer.cleanup()
    assert removed == 3
    assert catalog.registrations == {theirs.key: theirs}


async def test_a_full_pass_reads_each_node_once_whatever_the_number_of_services(
    catalog: MemoryCatalog, syncer: pr.catalog.CatalogSyncer
) -> None:
    desired = [_reg(n, service_id=f"s-{n}") for n in range(1000)]
    desired += [_reg(n, service_id=f"t-{n}", node="other-node") for n in range(10)]
    await syncer.sync(desired)
    await syncer.wait_applied()
    catalog.calls.clear()
    await syncer.wait_full_sync()
    assert catalog.calls == {"node_services": 2}
    assert syncer.calls["register"] == 1010


async def test_the_memory_catalog_loads_by_name_and_unknown_names_are_coded() -> None:
    backend = pr.catalog.load_catalog("memory")
    assert isinstance(backend, MemoryCatalog)
    assert isinstance(backend, pr.catalog.CatalogBackend)
    assert "memory" in [info.name for info in pr.catalog.available_catalogs()]
    with pytest.raises(pr.catalog.UnknownCatalog) as caught:
        pr.catalog.load_catalog("no-such-catalog")
    assert caught.value.code == "CATALOG_NOT_FOUND"
    assert "memory" in caught.value.message
    with pytest.raises(pr.InvalidConfig) as bad:
        pr.catalog.load_catalog("memory", {"address": "x"})
    assert [p.path for p in bad.value.problems] == ["address"]


# -- the bundle source on the fake adapter ---------------------------------------------------


def _plan(bundle_id: str, *ports: int) -> pr.BundlePlan:
    return pr.BundlePlan(
        bundle_id=bundle_id,
        workloads=(
            pr.WorkloadPlan(name="web", image="x/web:1", ports=tuple(pr.Port(p) for p in ports)),
            pr.WorkloadPlan(name="worker", image="x/worker:1"),
        ),
    )


async def test_bundles_of_the_fake_appear_and_disappear_as_applied_and_destroyed(
    catalog: MemoryCatalog,
) -> None:
    fake = FakeAdapter()
    syncer = pr.catalog.CatalogSyncer(catalog)
    source = pr.catalog.BundleSource(fake, syncer)
    plan = _plan("shop", 80, 8080)
    async with syncer.running(), source.running():
        source.track(plan, tags=("v1",))
        await fake.apply(plan)
        await _until(syncer, lambda: len(catalog.registrations) == 2)
        web = catalog.registrations[(NODE, "shop:web:80")]
        upstream = fake.upstream(pr.WorkloadRef("shop", "web"), 80)
        assert f"http://{web.address}:{web.port}" == upstream.url
        assert web.service == "shop-web"
        assert web.tags == ("v1", OWNER)
        assert web.metadata["pando-bundle"] == "shop"
        assert web.metadata["pando-adapter"] == "fake"
        await fake.destroy(pr.BundleRef(plan.bundle_id))
        await _until(syncer, lambda: catalog.registrations == {})


async def test_an_unhealthy_or_ended_workload_leaves_the_catalog_and_comes_back(
    catalog: MemoryCatalog,
) -> None:
    fake = FakeAdapter()
    syncer = pr.catalog.CatalogSyncer(catalog)
    source = pr.catalog.BundleSource(fake, syncer)
    plan = _plan("shop", 80)
    ref = pr.WorkloadRef("shop", "web")
    await fake.apply(plan)
    source.track(plan)
    async with syncer.running(), source.running():
        await _until(syncer, lambda: len(catalog.registrations) == 1)
        fake.set_health(ref, healthy=False)
        await _until(syncer, lambda: catalog.registrations == {})
        fake.set_health(ref, healthy=True)
        await _until(syncer, lambda: len(catalog.registrations) == 1)
        fake.simulate_gap()  # MISSED: everything is observed again, nothing changes
        observes = source.observes
        await _until(syncer, lambda: source.observes > observes)
        assert len(catalog.registrations) == 1


async def test_an_adapter_outage_keeps_the_bundles_registrations(catalog: MemoryCatalog) -> None:
    fake = FakeAdapter()
    syncer = pr.catalog.CatalogSyncer(catalog)
    source = pr.catalog.BundleSource(fake, syncer, retry_interval=0.01)
    plan = _plan("shop", 80)
    await fake.apply(plan)
    source.track(plan)
    async with syncer.running(), source.running():
        await _until(syncer, lambda: len(catalog.registrations) == 1)
        fake.faults.fail_next("observe", pr.AdapterUnavailable("the runtime is down"), times=1000)
        fake.simulate_gap()
        await _until(syncer, lambda: source.observes >= 3)
        assert len(catalog.registrations) == 1
        fake.faults.clear()
        await fake.destroy(pr.BundleRef(plan.bundle_id))
        await _until(syncer, lambda: catalog.registrations == {})


async def test_a_restarted_source_waits_for_every_tracked_bundle_before_its_first_set(
    catalog: MemoryCatalog,
) -> None:
    fake = FakeAdapter()
    plans = [_plan(f"app{n}", 80) for n in range(3)]
    for plan in plans:
        await fake.apply(plan)
    syncer = pr.catalog.CatalogSyncer(catalog)
    source = pr.catalog.BundleSource(fake, syncer)
    for plan in plans:
        source.track(plan)
    async with syncer.running(), source.running():
        await _until(syncer, lambda: len(catalog.registrations) == 3)
    catalog.calls.clear()
    fake.faults.fail_next("observe", pr.AdapterUnavailable("slow start"), times=2)
    again = pr.catalog.CatalogSyncer(catalog, reap_interval=0)
    source = pr.catalog.BundleSource(fake, again, retry_interval=0.01)
    for plan in plans:
        source.track(plan)
    async with again.running(), source.running():
        with anyio.fail_after(20):
            await again._desired_known.wait()
        await again.wait_full_sync()
    assert catalog.calls["deregister"] == 0
    assert len(catalog.registrations) == 3
