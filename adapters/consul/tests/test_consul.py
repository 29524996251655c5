"""The Consul backend and the syncer against a real Consul agent (built from source)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from _consul_helpers import registration, until
from localconsul.pytest_plugin import node_services
from pando_runtime_consul import ConsulCatalog, ConsulConfig
from setting_ranges import assert_out_of_range, check_edges, declared_ranges

import pando_runtime as pr

pytestmark = [pytest.mark.anyio, pytest.mark.consul]

OWNER = pr.catalog.CATALOG_OWNER_TAG


_reg = registration


async def test_register_read_and_deregister_on_a_synthetic_node(
    consul: ConsulCatalog, consul_http: httpx.AsyncClient, node: str
) -> None:
    assert await consul.node_services(node) == []
    registration = _reg(1, node, tags=("b", "a", OWNER))
    await consul.register(registration)
    assert await consul.node_services(node) == [registration]
    body = (await consul_http.get(f"/v1/catalog/node/{node}")).json()
    assert body["Node"]["Meta"] == {"external-source": "pando-runtime"}
    by_name = (await consul_http.get("/v1/catalog/service/svc-1")).json()
    assert [(s["Node"], s["ServiceAddress"], s["ServicePort"]) for s in by_name] == [
        (node, "10.0.0.1", 8001)
    ]
    await consul.deregister(node, registration.service_id)
    await consul.deregister(node, registration.service_id)  # gone already: no error
    assert await consul.node_services(node) == []
    assert consul.requests["catalog/register"] == 1


async def test_the_syncer_keeps_consul_equal_to_the_desired_set(
    consul: ConsulCatalog, consul_http: httpx.AsyncClient, node: str
) -> None:
    syncer = pr.catalog.CatalogSyncer(
        consul, nodes=(node,), resync_interval=3600, reap_interval=3600
    )
    async with syncer.running():
        await syncer.sync([_reg(1, node), _reg(2, node)])
        await syncer.wait_applied()
        assert set(await node_services(consul_http, node)) == {"svc-1:web:80", "svc-2:web:80"}
        await syncer.sync([_reg(1, node, port=9001)])  # one changes, one goes
        await syncer.wait_applied()
        services = await node_services(consul_http, node)
        assert set(services) == {"svc-1:web:80"}
        assert services["svc-1:web:80"]["Port"] == 9001
        assert services["svc-1:web:80"]["Tags"] == ["web", OWNER]


async def test_an_external_edit_is_overwritten_at_the_next_full_sync(
    consul: ConsulCatalog, consul_http: httpx.AsyncClient, node: str
) -> None:
    syncer = pr.catalog.CatalogSyncer(consul, nodes=(node,), resync_interval=3600)
    async with syncer.running():
        await syncer.sync([_reg(1, node)])
        await syncer.wait_applied()
        edit = {
            "Node": node,
            "Address": "127.0.0.1",
            "Service": {
                "ID": "svc-1:web:80",
                "Service": "svc-1",
                "Address": "192.0.2.9",
                "Port": 1,
                "Tags": ["web", OWNER],
            },
        }
        assert (await consul_http.put("/v1/catalog/register", json=edit)).status_code == 200
        await syncer.wait_full_sync()
        service = (await node_services(consul_http, node))["svc-1:web:80"]
        assert (service["Address"], service["Port"]) == ("10.0.0.1", 8001)


async def test_a_restart_with_a_full_catalog_deregisters_nothing_still_desired(
    consul_agent: Any, consul_http: httpx.AsyncClient, node: str
) -> None:
    desired = [_reg(n, node) for n in range(1, 21)]
    config = ConsulConfig(address=consul_agent.http_address)
    first = ConsulCatalog(config)
    syncer = pr.catalog.CatalogSyncer(first, nodes=(node,))
    async with syncer.running():
        await syncer.sync(desired)
        await syncer.wait_applied()
    await first.aclose()
    modify = {k: s["ModifyIndex"] for k, s in (await node_services(consul_http, node)).items()}
    second = ConsulCatalog(config)
    again = pr.catalog.CatalogSyncer(second, nodes=(node,), reap_interval=0)
    async with again.running():
        await again.sync(desired)
        await again.wait_full_sync()
        await again.wait_full_sync()
    await second.aclose()
    for write in ("txn", "catalog/deregister", "catalog/register"):  # the syncer writes by txn
        assert second.requests[write] == 0, write
    after = {k: s["ModifyIndex"] for k, s in (await node_services(consul_http, node)).items()}
    assert after == modify, "nothing was rewritten"


async def test_registrations_made_by_others_are_never_touched(
    consul: ConsulCatalog, consul_http: httpx.AsyncClient, node: str
) -> None:
    theirs = {
        "Node": node,
        "Address": "127.0.0.1",
        "Service": {"ID": "theirs", "Service": "theirs", "Port": 5, "Tags": ["other-tool"]},
    }
    clash = {
        "Node": node,
        "Address": "127.0.0.1",
        "Service": {"ID": "svc-2:web:80", "Service": "svc-2", "Port": 6},
    }
    for body in (theirs, clash):
        assert (await consul_http.put("/v1/catalog/register", json=body)).status_code == 200
    before = await node_services(consul_http, node)
    syncer = pr.catalog.CatalogSyncer(consul, nodes=(node,), reap_interval=0)
    async with syncer.running():
        await syncer.sync([_reg(1, node), _reg(2, node)])
        await syncer.wait_full_sync()
        await syncer.sync([])
        await syncer.wait_full_sync()
        assert syncer.status.conflicts == 1
        assert await syncer.cleanup() == 0
    after = await node_services(consul_http, node)
    assert after == before


async def test_cleanup_removes_everything_it_owns(
    consul: ConsulCatalog, consul_http: httpx.AsyncClient, node: str
) -> None:
    syncer = pr.catalog.CatalogSyncer(consul, nodes=(node,))
    async with syncer.running():
        await syncer.sync([_reg(n, node) for n in range(1, 4)])
        await syncer.wait_applied()
    assert await pr.catalog.CatalogSyncer(consul, nodes=(node,)).cleanup() == 3
    assert await node_services(consul_http, node) == {}


async def test_an_unreachable_consul_is_a_coded_error_naming_the_address(node: str) -> None:
    from localcluster.net import free_ports  # noqa: PLC0415 - the test harness

    address = f"http://127.0.0.1:{free_ports(1)[0]}"
    backend = ConsulCatalog(ConsulConfig(address=address, timeout=2))
    with pytest.raises(pr.catalog.CatalogUnavailable) as caught:
        await backend.check()
    assert caught.value.code == "CATALOG_UNAVAILABLE"
    assert caught.value.details["setting"] == "address"
    assert address in caught.value.message
    syncer = pr.catalog.CatalogSyncer(backend, nodes=(node,), backoff_initial=0.01)
    async with syncer.running():
        await syncer.sync([_reg(1, node)])
        await until(syncer, lambda: syncer.status.last_error is not None)
        assert syncer.status.desired == 1
        assert not syncer.status.healthy
        assert address in (syncer.status.last_error or "")
    await backend.aclose()


def test_bad_settings_are_coded_errors_naming_each_setting() -> None:
    with pytest.raises(pr.InvalidConfig) as caught:
        pr.catalog.load_catalog("consul", {"address": "ftp://x", "timeout": 0, "node_address": ""})
    assert caught.value.code == "INVALID_CONFIG"
    assert [(p.path, p.code) for p in caught.value.problems] == [
        ("address", "invalid"),
        ("node_address", "required"),
        ("timeout", "out_of_range"),
    ]
    assert_out_of_range(caught.value, "timeout", "timeout")
    with pytest.raises(pr.InvalidConfig) as unknown:
        pr.catalog.load_catalog("consul", {"adress": "http://127.0.0.1:8500"})
    assert [p.path for p in unknown.value.problems] == ["adress"]


def test_the_timeout_s_range_is_enforced_however_the_backend_is_made() -> None:
    assert declared_ranges(ConsulConfig) == {"timeout": (None, 0, 86_400, None)}
    assert check_edges(ConsulConfig, lambda s: pr.catalog.load_catalog("consul", s)) == 7
    with pytest.raises(pr.InvalidConfig) as caught:
        ConsulCatalog(ConsulConfig(timeout=float("nan")))
    assert [(p.path, p.code) for p in caught.value.problems] == [("timeout", "out_of_range")]
    with pytest.raises(pr.InvalidConfig) as made:
        ConsulConfig(address="http://", node_address="")
    assert [p.path for p in made.value.problems] == ["address", "node_address"]


def test_the_token_is_never_shown() -> None:
    config = ConsulConfig(token="s3cr3t-token")  # noqa: S106 - a made-up token
    assert "s3cr3t" not in repr(config)
    info = next(i for i in pr.catalog.available_catalogs() if i.name == "consul")
    assert [f.key for f in info.config_fields if f.secret] == ["token"]
