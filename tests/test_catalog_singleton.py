"""Catalog sync as a singleton on the fake: three replicas, one writer, a killed one succeeded.

Each replica's syncer writes through its own recording wrapper of one in-memory catalog,
so the test knows which replica made every call. Lease timings are short and real;
nothing asserts on a duration (a generous bound only catches a hang).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import anyio
import pytest

import pando_runtime as pr
from pando_runtime.testing import FakeAdapter, FakeReplica, MemoryCatalog

pytestmark = pytest.mark.anyio

SETTINGS = pr.MembershipSettings(lease_duration=1.2, renew_deadline=0.8, retry_period=0.1)
HANG = 20.0


def _reg(n: int) -> pr.catalog.CatalogRegistration:
    return pr.catalog.CatalogRegistration(
        service=f"svc-{n}", service_id=f"svc-{n}-0", address=f"10.0.0.{n}", port=8000 + n
    )


class Recording:
    """One replica's view of the shared catalog: every call is logged with the replica."""

    def __init__(self, catalog: MemoryCatalog, replica: str, log: list[tuple[str, str]]) -> None:
        self.catalog, self.replica, self.log = catalog, replica, log

    async def node_services(self, node: str) -> Sequence[pr.catalog.CatalogRegistration]:
        self.log.append((self.replica, "node_services"))
        return await self.catalog.node_services(node)

    async def register(self, registration: pr.catalog.CatalogRegistration) -> None:
        self.log.append((self.replica, "register"))
        await self.catalog.register(registration)

    async def deregister(self, node: str, service_id: str) -> None:
        self.log.append((self.replica, "deregister"))
        await self.catalog.deregister(node, service_id)

    async def aclose(self) -> None:
        pass


def _writers(log: list[tuple[str, str]]) -> list[str]:
    """The replicas that wrote, in order, each run of writes by one replica counted once."""
    runs: list[str] = []
    for replica, call in log:
        if call != "node_services" and (not runs or runs[-1] != replica):
            runs.append(replica)
    return runs


async def _until(check: Callable[[], bool]) -> None:
    with anyio.fail_after(HANG):
        while not check():  # noqa: ASYNC110 - polls state that no event announces
            await anyio.sleep(SETTINGS.retry_period)


async def test_one_replica_writes_the_catalog_and_a_killed_ones_successor_resumes() -> None:
    fake = FakeAdapter()
    replicas: dict[str, FakeReplica] = {name: fake.replica() for name in ("a", "b", "c")}
    catalog = MemoryCatalog()
    log: list[tuple[str, str]] = []
    syncers = {
        name: pr.catalog.CatalogSyncer(
            Recording(catalog, name, log), writer=name, resync_interval=0.2, reap_interval=0.2
        )
        for name in replicas
    }
    holding: dict[str, bool] = {}
    ended: list[str] = []

    async def run(name: str) -> None:
        def on_hold(held: bool) -> None:
            holding[name] = held

        try:
            async with (
                replicas[name].membership(name, SETTINGS) as membership,
                syncers[name].running(membership, on_hold=on_hold),
            ):
                await anyio.sleep_forever()
        except* pr.NotOwner:  # the killed replica: it cannot hold anything any more
            ended.append(name)

    async def publish(registrations: list[pr.catalog.CatalogRegistration]) -> None:
        for syncer in syncers.values():  # as each replica's source would
            await syncer.sync(registrations)

    first = [_reg(n) for n in range(20)]
    await publish(first)
    async with anyio.create_task_group() as group:
        for name in replicas:
            group.start_soon(run, name)
        await _until(lambda: len(catalog.registrations) == len(first))
        (leader,) = _writers(log)
        assert [n for n, held in holding.items() if held] == [leader]
        meta = pr.catalog.CATALOG_WRITER_META
        writers = {r.metadata[meta] for r in catalog.registrations.values()}
        assert writers == {leader}

        killed_at = len(log)
        replicas[leader].kill()
        second = [_reg(n) for n in range(1, 25)]  # svc-0 leaves, four arrive
        await publish(second)
        wanted = {r.key for r in second}
        await _until(lambda: set(catalog.registrations) == wanted)
        await _until(lambda: ended == [leader])
        group.cancel_scope.cancel()

    after = log[killed_at:]
    successor = _writers(after)[-1]
    assert successor != leader
    assert _writers(log) == [leader, successor], "one writer at a time, no return"
    # The successor read the catalog (a full pass) before its first write.
    calls = [call for replica, call in after if replica == successor]
    assert calls[0] == "node_services"
    # Nothing lost, nothing twice; what did not change keeps its writer (no rewrite).
    assert len(catalog.registrations) == len(second)
    by_writer = {
        key: r.metadata[pr.catalog.CATALOG_WRITER_META] for key, r in catalog.registrations.items()
    }
    assert {by_writer[_reg(n).key] for n in range(20, 25)} == {successor}
    assert {by_writer[_reg(n).key] for n in range(1, 20)} == {leader}


async def test_a_replica_that_left_its_membership_is_refused() -> None:
    fake = FakeAdapter()
    syncer = pr.catalog.CatalogSyncer(MemoryCatalog(), writer="a")
    async with fake.membership("a", SETTINGS) as membership:
        pass
    with pytest.raises(pr.NotOwner):
        await pr.catalog.sync_as_singleton(syncer, membership)


async def test_the_writer_is_left_out_when_registrations_are_compared() -> None:
    catalog = MemoryCatalog()
    first = pr.catalog.CatalogSyncer(catalog, writer="a")
    await first.sync([_reg(1)])
    async with first.running():
        await first.wait_applied()
    second = pr.catalog.CatalogSyncer(catalog, writer="b")
    await second.sync([_reg(1)])
    async with second.running():
        await second.wait_full_sync()
    assert second.calls["register"] == 0
    (stored,) = catalog.registrations.values()
    assert stored.metadata[pr.catalog.CATALOG_WRITER_META] == "a"
