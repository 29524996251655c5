"""Catalog sync through Consul transactions (``PUT /v1/txn``), against a real Consul agent.

Counts are Consul HTTP requests as the backend counts them (``ConsulCatalog.requests``).
"""

from __future__ import annotations

import math
from typing import Any

import anyio
import httpx
import pytest
from _consul_helpers import registration, until
from localconsul.pytest_plugin import node_services
from pando_runtime_consul import ConsulCatalog, ConsulConfig

import pando_runtime as pr

pytestmark = [pytest.mark.anyio, pytest.mark.consul]

OWNER = pr.catalog.CATALOG_OWNER_TAG
WRITER = pr.catalog.CATALOG_WRITER_META
TXN_OPS = 64


def _reg(n: int, node: str, **fields: Any) -> pr.catalog.CatalogRegistration:
    """A registration whose service name is the node's own (looked up by name below)."""
    return registration(n, node, **{"service": f"{node}-svc-{n}", **fields})


async def test_a_first_sync_of_many_services_takes_a_few_transactions(
    consul: ConsulCatalog, consul_http: httpx.AsyncClient, node: str
) -> None:
    count = 300
    syncer = pr.catalog.CatalogSyncer(
        consul, nodes=(node,), writer="host-a", resync_interval=3600, reap_interval=3600
    )
    async with syncer.running():
        await syncer.sync([_reg(n, node) for n in range(count)])
        await syncer.wait_applied()
        services = await node_services(consul_http, node)
        assert sorted(services) == sorted(f"svc-{n}:web:80" for n in range(count))
        assert {s["Meta"][WRITER] for s in services.values()} == {"host-a"}
        assert all(s["Tags"] == ["web", OWNER] for s in services.values())
        body = (await consul_http.get(f"/v1/catalog/node/{node}")).json()
        assert body["Node"]["Meta"] == {"external-source": "pando-runtime"}
        batches = math.ceil(count / TXN_OPS)
        # one read of the node (404: it is new), one transaction making it, then the batches
        assert dict(consul.requests) == {"catalog/node-services": 1, "txn": 1 + batches}
        assert syncer.calls["write_batch"] == batches
        assert syncer.calls["register"] == 0

        await syncer.wait_full_sync()  # a resync finds everything equal: reads, writes nothing
        assert dict(consul.requests) == {"catalog/node-services": 2, "txn": 1 + batches}
        assert len(await node_services(consul_http, node)) == count


async def test_an_invalid_service_is_refused_alone_and_every_other_lands(
    consul: ConsulCatalog, consul_http: httpx.AsyncClient, node: str
) -> None:
    desired = [_reg(n, node) for n in range(100)]
    # both in the first transaction: Consul refuses one at its pre-check, one in its store
    desired[10] = _reg(10, node, address="0.0.0.0")  # noqa: S104 - Consul refuses it
    desired[40] = _reg(40, node, metadata={"consul-reserved": "x"})
    bad = {desired[10].key, desired[40].key}
    changes: list[pr.catalog.SyncChange] = []
    syncer = pr.catalog.CatalogSyncer(
        consul,
        nodes=(node,),
        resync_interval=3600,
        backoff_initial=3600,  # no retry on its own while the test looks
        on_change=changes.append,
    )
    async with syncer.running():
        await syncer.sync(desired)
        await until(syncer, lambda: len(changes) == len(desired))
        failed = [c for c in changes if c.kind == pr.catalog.SyncChangeKind.FAILED]
        assert {(c.node, c.service_id) for c in failed} == bad
        assert {c.code for c in failed} == {"CATALOG_REFUSED"}
        registered = [c for c in changes if c.kind == pr.catalog.SyncChangeKind.REGISTERED]
        assert len(registered) == len(desired) - 2
        services = await node_services(consul_http, node)
        assert set(services) == {r.service_id for r in desired if r.key not in bad}
        assert not syncer.status.healthy
        # 1 node, then the first 64: refused twice (each time naming one) and written,
        # then the other 36: far from one request per service, or a split down to singles
        assert consul.requests["txn"] == 5

        # the backend's own answer for a refused write: coded, naming the registration
        refused = await consul.write_batch([pr.catalog.CatalogWrite(desired[10])])
        error = refused[desired[10].key]
        assert isinstance(error, pr.catalog.CatalogRefused)
        assert error.code == "CATALOG_REFUSED"
        assert error.details["node"] == node
        assert error.details["service_id"] == "svc-10:web:80"
        assert "Invalid service address" in error.message

        fixed = [*desired]
        fixed[10], fixed[40] = _reg(10, node), _reg(40, node)
        await syncer.sync(fixed)
        await syncer.wait_applied()
        services = await node_services(consul_http, node)
        assert set(services) == {r.service_id for r in fixed}
        assert syncer.status.healthy


async def test_deregistrations_and_cleanup_go_in_batches(
    consul: ConsulCatalog, consul_http: httpx.AsyncClient, node: str
) -> None:
    syncer = pr.catalog.CatalogSyncer(
        consul, nodes=(node,), resync_interval=3600, reap_interval=3600
    )
    async with syncer.running():
        await syncer.sync([_reg(n, node) for n in range(200)])
        await syncer.wait_applied()
        before = consul.requests["txn"]
        await syncer.sync([_reg(n, node) for n in range(70)])  # 130 leave
        await syncer.wait_applied()
        assert consul.requests["txn"] - before == math.ceil(130 / TXN_OPS)
        assert len(await node_services(consul_http, node)) == 70
    before = consul.requests["txn"]
    assert await pr.catalog.CatalogSyncer(consul, nodes=(node,)).cleanup() == 70
    assert consul.requests["txn"] - before == math.ceil(70 / TXN_OPS)
    assert consul.requests["catalog/deregister"] == 0
    assert await node_services(consul_http, node) == {}


async def test_a_batch_applied_but_unanswered_is_not_written_twice(
    consul_agent: Any, consul_http: httpx.AsyncClient, node: str, toxiproxy_server: Any
) -> None:
    toxiproxy = toxiproxy_server.client
    upstream = consul_agent.http_address.removeprefix("http://")
    proxy = toxiproxy.create(f"consul-{node}", upstream)
    backend = ConsulCatalog(ConsulConfig(address=f"http://{proxy.listen}", timeout=5))
    failures: list[pr.catalog.SyncChange] = []

    def on_change(change: pr.catalog.SyncChange) -> None:
        if change.kind == pr.catalog.SyncChangeKind.FAILED:
            failures.append(change)

    desired = [_reg(n, node) for n in range(150)]
    syncer = pr.catalog.CatalogSyncer(
        backend,
        nodes=(node,),
        writer="host-a",
        resync_interval=3600,
        backoff_initial=0.05,
        on_change=on_change,
    )
    try:
        async with syncer.running():
            await syncer.sync(desired[:1])  # the node exists, the connection is open
            await syncer.wait_applied()
            # Consul gets each transaction whole and commits it; its answer is cut short
            with toxiproxy.toxic(proxy.name, "limit_data", stream="downstream", bytes=8):
                await syncer.sync(desired)
                await until(syncer, lambda: len(failures) >= len(desired) - 1)
                assert {f.code for f in failures} == {"CATALOG_UNAVAILABLE"}
                # written although unanswered: the retries ahead rewrite, never add
                assert len(await node_services(consul_http, node)) == len(desired)
            await syncer.wait_applied()
            await syncer.wait_full_sync()
            after_full = backend.requests["txn"]
            await syncer.wait_full_sync()  # everything equal: nothing more written
            assert backend.requests["txn"] == after_full
    finally:
        await backend.aclose()
        toxiproxy.set_enabled(proxy.name, False)  # the server, and its proxies, end with the module
    body = (await consul_http.get(f"/v1/catalog/node-services/{node}")).json()
    ids = [s["ID"] for s in body["Services"]]
    assert sorted(ids) == sorted(r.service_id for r in desired), "each registration once"
    assert {s["Meta"][WRITER] for s in body["Services"]} == {"host-a"}
    for n in (0, 63, 64, 149):  # by name too: one instance each, on the one node
        instances = (await consul_http.get(f"/v1/catalog/service/{node}-svc-{n}")).json()
        assert [(i["Node"], i["ServiceID"]) for i in instances] == [(node, f"svc-{n}:web:80")]


async def test_only_the_singleton_holder_writes_its_batches(
    consul_agent: Any, consul_http: httpx.AsyncClient, node: str
) -> None:
    from pando_runtime.testing import FakeAdapter  # noqa: PLC0415

    fake = FakeAdapter()
    # a lease long enough that a busy machine never hands the singleton over mid-test
    quick = pr.MembershipSettings(lease_duration=20, renew_deadline=15, retry_period=0.1)
    desired = [_reg(n, node) for n in range(200)]
    config = ConsulConfig(address=consul_agent.http_address)
    backends = {name: ConsulCatalog(config) for name in ("host-a", "host-b")}
    holders: list[str] = []
    syncers: dict[str, pr.catalog.CatalogSyncer] = {}
    held = anyio.Event()

    async def replica(adapter: Any, name: str) -> None:
        async with adapter.membership(name, quick) as membership:
            syncer = pr.catalog.CatalogSyncer(
                backends[name], nodes=(node,), writer=name, resync_interval=3600
            )
            syncers[name] = syncer
            await syncer.sync(desired)

            def on_hold(holds: bool) -> None:
                if holds:
                    holders.append(name)
                    held.set()

            async with syncer.running(membership, on_hold=on_hold):
                await anyio.sleep_forever()

    try:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(replica, fake, "host-a")
                group.start_soon(replica, fake.replica(), "host-b")
                await held.wait()
                await syncers[holders[0]].wait_applied()
                group.cancel_scope.cancel()
    finally:
        for backend in backends.values():
            await backend.aclose()
    (holder,) = holders
    (other,) = set(backends) - {holder}
    assert backends[other].requests["txn"] == 0
    assert backends[holder].requests["txn"] == 1 + math.ceil(len(desired) / TXN_OPS)
    services = await node_services(consul_http, node)
    assert {s["Meta"][WRITER] for s in services.values()} == {holder}


async def test_a_transaction_too_large_for_consul_is_split_until_it_fits(
    consul: ConsulCatalog, consul_http: httpx.AsyncClient, node: str
) -> None:
    # 64 services of 60 metadata pairs of 500 characters: about 2 MB in one transaction,
    # where Consul takes 512 kB (txn_max_req_len) and answers 413 naming no operation
    metadata = {f"k{i}": "v" * 500 for i in range(60)}
    desired = [_reg(n, node, metadata=metadata) for n in range(TXN_OPS)]
    syncer = pr.catalog.CatalogSyncer(consul, nodes=(node,), resync_interval=3600)
    async with syncer.running():
        await syncer.sync(desired)
        await syncer.wait_applied()
        assert syncer.status.healthy
    services = await node_services(consul_http, node)
    assert sorted(services) == sorted(r.service_id for r in desired)
    assert all(len(s["Meta"]) == 60 for s in services.values())
    # one batch: the node, then 64 and 2 x 32 refused as too large, 4 x 16 that fit
    assert syncer.calls["write_batch"] == 1
    assert consul.requests["txn"] == 1 + 1 + 2 + 4


async def test_a_node_removed_behind_the_syncer_is_made_again(
    consul: ConsulCatalog, consul_http: httpx.AsyncClient, node: str
) -> None:
    syncer = pr.catalog.CatalogSyncer(consul, nodes=(node,), resync_interval=3600)
    async with syncer.running():
        await syncer.sync([_reg(1, node)])
        await syncer.wait_applied()
        gone = await consul_http.put("/v1/catalog/deregister", json={"Node": node})
        assert gone.status_code == 200
        before = consul.requests["txn"]
        await syncer.sync([_reg(1, node), _reg(2, node)])  # no full pass: it believes 1 is there
        await syncer.wait_applied()
        assert syncer.status.healthy
        # refused (missing node), the node made, the same transaction again
        assert consul.requests["txn"] - before == 3
        assert set(await node_services(consul_http, node)) == {"svc-2:web:80"}
        await syncer.wait_full_sync()  # the full pass finds 1 missing and writes it back
    assert set(await node_services(consul_http, node)) == {"svc-1:web:80", "svc-2:web:80"}
    body = (await consul_http.get(f"/v1/catalog/node/{node}")).json()
    assert body["Node"]["Meta"] == {"external-source": "pando-runtime"}
