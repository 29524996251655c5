"""The syncer's writes in batches, on a backend that batches over the in-memory catalog.

The Consul backend's transactions are tested against a real Consul
(``adapters/consul/tests/test_consul_txn.py``); here the core's side: batch sizes, a refused
write reported alone, an unreachable batch retried, and the single calls for a backend
without ``write_batch``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import anyio
import pytest

import pando_runtime as pr
from pando_runtime.testing import MemoryCatalog

pytestmark = pytest.mark.anyio

NODE = pr.catalog.CATALOG_NODE


def _reg(n: int, **kw: object) -> pr.catalog.CatalogRegistration:
    fields: dict[str, object] = {
        "service": f"svc-{n}",
        "service_id": f"svc-{n}-0",
        "address": f"10.0.0.{n}",
        "port": 8000,
    }
    fields.update(kw)
    return pr.catalog.CatalogRegistration(**fields)  # type: ignore[arg-type]


class BatchingCatalog:
    """Batches over a :class:`MemoryCatalog`: refuses the service ``bad``, can be down."""

    batch_limit = 10

    def __init__(self) -> None:
        self.memory = MemoryCatalog()
        self.batches: list[int] = []
        self.down = False

    async def node_services(self, node: str) -> Sequence[pr.catalog.CatalogRegistration]:
        return await self.memory.node_services(node)

    async def register(self, registration: pr.catalog.CatalogRegistration) -> None:
        await self.memory.register(registration)

    async def deregister(self, node: str, service_id: str) -> None:
        await self.memory.deregister(node, service_id)

    async def aclose(self) -> None:
        await self.memory.aclose()

    async def write_batch(
        self, writes: Sequence[pr.catalog.CatalogWrite]
    ) -> dict[tuple[str, str], pr.PandoRuntimeError]:
        await anyio.lowlevel.checkpoint()
        if self.down:
            raise pr.catalog.CatalogUnavailable("the batching catalog is down")
        self.batches.append(len(writes))
        refused: dict[tuple[str, str], pr.PandoRuntimeError] = {}
        for write in writes:
            if write.remove:
                self.memory.remove(*write.key)
            elif write.registration.service == "bad":
                refused[write.key] = pr.catalog.CatalogRefused(f"{write.key} is refused")
            else:
                self.memory.put(write.registration)
        return refused


async def _until(syncer: pr.catalog.CatalogSyncer, check: Callable[[], bool]) -> None:
    with anyio.fail_after(10):
        while not check():
            await syncer.wait_pass()


async def test_a_batching_backend_gets_batches_and_a_refused_write_alone_fails() -> None:
    catalog = BatchingCatalog()
    assert isinstance(catalog, pr.catalog.BatchCatalogBackend)
    changes: list[pr.catalog.SyncChange] = []
    syncer = pr.catalog.CatalogSyncer(
        catalog, writer="host-a", backoff_initial=60, on_change=changes.append
    )
    desired = [_reg(n) for n in range(35)]
    desired[7] = _reg(7, service="bad")
    async with syncer.running():
        await syncer.sync(desired)
        await _until(syncer, lambda: len(changes) == len(desired))
        assert sorted(catalog.batches) == [5, 10, 10, 10]
        assert syncer.calls["write_batch"] == 4
        assert syncer.calls["register"] == 0
        assert catalog.memory.calls["register"] == 0
        assert set(catalog.memory.registrations) == {r.key for r in desired} - {desired[7].key}
        (failed,) = [c for c in changes if c.kind == pr.catalog.SyncChangeKind.FAILED]
        assert (failed.service_id, failed.code) == ("svc-7-0", "CATALOG_REFUSED")
        written = catalog.memory.registrations.values()
        assert {r.metadata[pr.catalog.CATALOG_WRITER_META] for r in written} == {"host-a"}
        assert not syncer.status.healthy

        await syncer.sync(desired[20:])  # 20 leave, in batches too (the bad one was never in)
        await syncer.wait_applied()
        assert set(catalog.memory.registrations) == {r.key for r in desired[20:]}
        assert sorted(catalog.batches[4:]) == [9, 10]
        after = syncer.status  # a new snapshot: the refused one has left the desired set
        assert after.healthy
        assert await syncer.cleanup() == 15
    assert catalog.memory.registrations == {}


async def test_an_unreachable_batch_is_retried_until_written_once() -> None:
    catalog = BatchingCatalog()
    catalog.down = True
    codes: list[str | None] = []
    syncer = pr.catalog.CatalogSyncer(
        catalog, backoff_initial=0.01, on_change=lambda change: codes.append(change.code)
    )
    desired = [_reg(n) for n in range(25)]
    async with syncer.running():
        await syncer.sync(desired)
        await _until(syncer, lambda: len(codes) >= len(desired))
        assert set(codes) == {"CATALOG_UNAVAILABLE"}
        assert catalog.memory.registrations == {}
        catalog.down = False
        await syncer.wait_applied()
    assert set(catalog.memory.registrations) == {r.key for r in desired}
    assert sum(catalog.batches) == len(desired), "each registration written once"


async def test_a_backend_without_write_batch_gets_one_call_per_write() -> None:
    catalog = MemoryCatalog()
    assert not isinstance(catalog, pr.catalog.BatchCatalogBackend)
    syncer = pr.catalog.CatalogSyncer(catalog)
    async with syncer.running():
        await syncer.sync([_reg(n) for n in range(12)])
        await syncer.wait_applied()
        await syncer.sync([])
        await syncer.wait_applied()
    assert (catalog.calls["register"], catalog.calls["deregister"]) == (12, 12)
    assert syncer.calls["write_batch"] == 0
