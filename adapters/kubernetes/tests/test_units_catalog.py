"""The public watch controller and the Service catalog source, on a scripted list/watch source.

The API is not faked here: only the source a controller lists and watches is (the same
seam the adapter's cache tests use). Against the real API server: test_cluster_catalog.py.
"""

# ruff: noqa: ASYNC110
from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from pando_runtime_kubernetes import Controller, Resource, ServiceSource, ServiceSyncOptions

import pando_runtime as pr
from pando_runtime.testing import MemoryCatalog

pytestmark = pytest.mark.anyio


class ScriptedSource:
    """Lists ``items``; each watch yields what the test sends until the test ends it."""

    def __init__(self, items: list[dict[str, Any]] | None = None) -> None:
        self.items = list(items or [])
        self.lists = 0
        self.send, self._receive = anyio.create_memory_object_stream[dict[str, Any]](100)

    async def list(self, project: Any) -> tuple[list[Any], str]:
        self.lists += 1
        return [kept for item in self.items if (kept := project(item)) is not None], "7"

    @asynccontextmanager
    async def watch(self, resource_version: str) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        async def events() -> AsyncIterator[dict[str, Any]]:
            async for event in self._receive:
                yield event

        yield events()


def _obj(name: str, value: str, namespace: str | None = "ns", version: str = "8") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": version}
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta, "data": {"v": value}, "status": {"noise": version}}


def _value(obj: dict[str, Any]) -> str | None:
    return obj["data"]["v"] if obj["data"]["v"] != "skip" else None


async def _settle(check: Any) -> None:
    """Poll a callback's effect (bounded: a guard, not a timed assertion)."""
    with anyio.fail_after(10):
        while not check():
            await anyio.sleep(0.001)


def test_a_resource_names_its_collection_path() -> None:
    assert Resource(version="v1", plural="services").path == "/api/v1/services"
    assert (
        Resource(version="v1", plural="services", namespace="a").path
        == "/api/v1/namespaces/a/services"
    )
    ingresses = Resource(group="networking.k8s.io", version="v1", plural="ingresses")
    assert ingresses.path == "/apis/networking.k8s.io/v1/ingresses"


async def test_the_controller_calls_back_per_key_with_projections_and_retries() -> None:
    source = ScriptedSource([_obj("a", "1"), _obj("b", "1"), _obj("c", "skip")])
    upserts: list[tuple[str, str]] = []
    deletes: list[tuple[str, str]] = []
    failures = {"ns/b": 2}

    async def upsert(key: str, value: str) -> None:
        if failures.get(key):
            failures[key] -= 1
            raise RuntimeError("not yet")
        upserts.append((key, value))

    async def delete(key: str, value: str) -> None:
        deletes.append((key, value))

    controller: Controller[str] = Controller(
        None,
        Resource(version="v1", plural="configmaps"),
        upsert=upsert,
        delete=delete,
        project=_value,
        source=source,
        backoff_initial=0.001,
    )
    assert not controller.has_synced
    async with controller.running():
        with anyio.fail_after(10):
            await controller.wait_synced()
        await _settle(lambda: ("ns/b", "1") in upserts)
        assert sorted(upserts) == [("ns/a", "1"), ("ns/b", "1")]
        assert controller.errors == 2
        assert controller.last_sync_resource_version == "7"
        # only a change of the projection calls back: a status-only change does not
        await source.send.send({"type": "MODIFIED", "object": _obj("a", "1", version="9")})
        await source.send.send({"type": "MODIFIED", "object": _obj("a", "2", version="10")})
        await source.send.send({"type": "DELETED", "object": _obj("b", "1", version="11")})
        await _settle(lambda: deletes)
        assert upserts[-1] == ("ns/a", "2")
        assert upserts.count(("ns/a", "1")) == 1
        assert deletes == [("ns/b", "1")]
        assert controller.last_sync_resource_version == "11"
        assert controller.items() == {"ns/a": "2"}
        # an object that stops being of interest is a delete for the callbacks
        await source.send.send({"type": "MODIFIED", "object": _obj("a", "skip", version="12")})
        await _settle(lambda: len(deletes) == 2)
        assert deletes[-1] == ("ns/a", "2")


async def test_a_relist_deletes_what_went_missing_and_background_tasks_are_awaited() -> None:
    source = ScriptedSource([_obj("a", "1", namespace=None), _obj("b", "1", namespace=None)])
    deletes: list[str] = []
    ended: list[str] = []

    async def upsert(key: str, value: str) -> None:
        pass

    async def delete(key: str, value: str) -> None:
        deletes.append(key)

    async def background() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.01)  # cleanup that takes a moment: awaited on stop
                ended.append("background")

    controller: Controller[str] = Controller(
        None,
        Resource(version="v1", plural="namespaces"),
        upsert=upsert,
        delete=delete,
        project=_value,
        source=source,
        background=[background],
    )
    async with controller.running():
        with anyio.fail_after(10):
            await controller.wait_synced()
        source.items = [_obj("a", "1", namespace=None)]
        controller.loop.request_relist()
        await _settle(lambda: deletes)
    assert deletes == ["b"], "cluster-scoped keys are bare names"
    assert ended == ["background"]


def _service(
    name: str,
    namespace: str = "shop",
    *,
    type_: str = "ClusterIP",
    ports: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    ingress: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
        "spec": {
            "type": type_,
            "clusterIP": "10.96.0.10",
            "ports": ports or [{"name": "http", "port": 80, "nodePort": 30080}],
        },
        "status": {"loadBalancer": {"ingress": ingress or []}},
    }


def _node(name: str, external: str | None, internal: str | None) -> dict[str, Any]:
    addresses = [{"type": "Hostname", "address": name}]
    if external:
        addresses.append({"type": "ExternalIP", "address": external})
    if internal:
        addresses.append({"type": "InternalIP", "address": internal})
    return {"metadata": {"name": name}, "status": {"addresses": addresses}}


async def _published(
    options: ServiceSyncOptions,
    services: list[dict[str, Any]],
    *,
    nodes: list[dict[str, Any]] | None = None,
    ingresses: list[dict[str, Any]] | None = None,
) -> dict[str, pr.catalog.CatalogRegistration]:
    catalog = MemoryCatalog()
    syncer = pr.catalog.CatalogSyncer(catalog, nodes=(options.node,))
    sources = {
        "services": ScriptedSource(services),
        "nodes": ScriptedSource(nodes or []),
        "ingresses": ScriptedSource(ingresses or []),
    }
    source = ServiceSource(None, syncer, options, sources=sources)
    async with syncer.running(), source.running():
        with anyio.fail_after(10):
            while not source.published:
                await syncer.wait_pass()
        await syncer.wait_applied()
    return {r.service_id: r for r in catalog.registrations.values()}


async def test_services_are_named_filtered_and_addressed_by_the_options() -> None:
    services = [
        _service("web"),
        _service("hidden", annotations={"pando.dev/catalog-sync": "false"}),
        _service("db", namespace="kube-system"),
        _service("api", namespace="other"),
        _service("named", annotations={"pando.dev/catalog-name": "shop-front"}),
        _service(
            "multi",
            ports=[{"name": "metrics", "port": 9090}, {"name": "grpc", "port": 9000}],
            annotations={"pando.dev/catalog-port": "grpc"},
        ),
        {**_service("headless"), "spec": {"clusterIP": "None", "ports": [{"port": 1}]}},
        _service("ext", type_="ExternalName"),
    ]
    options = ServiceSyncOptions(
        allow_namespaces="shop,kube-system", prefix="k-", namespace_suffix=True
    )
    published = await _published(options, services)
    assert sorted(published) == ["shop/multi", "shop/named", "shop/web"]
    web = published["shop/web"]
    assert (web.service, web.address, web.port, web.node) == (
        "k-web-shop",
        "10.96.0.10",
        80,
        "k8s-sync",
    )
    assert web.tags == ("k8s", pr.catalog.CATALOG_OWNER_TAG)
    assert web.metadata["k8s-namespace"] == "shop"
    assert published["shop/named"].service == "shop-front"
    assert published["shop/multi"].port == 9000


async def test_explicit_enable_only_syncs_annotated_services() -> None:
    services = [_service("web"), _service("on", annotations={"pando.dev/catalog-sync": "true"})]
    published = await _published(ServiceSyncOptions(default_sync=False), services)
    assert sorted(published) == ["shop/on"]
    published = await _published(ServiceSyncOptions(sync_cluster_ip=False), services)
    assert published == {}


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("external-only", {"n1": "203.0.113.1"}),
        ("external-first", {"n1": "203.0.113.1", "n2": "10.0.0.2"}),
        ("internal-only", {"n1": "10.0.0.1", "n2": "10.0.0.2"}),
    ],
)
async def test_node_port_addresses_follow_the_mode(mode: str, expected: dict[str, str]) -> None:
    nodes = [_node("n1", "203.0.113.1", "10.0.0.1"), _node("n2", None, "10.0.0.2")]
    services = [_service("web", type_="NodePort")]
    published = await _published(ServiceSyncOptions(node_port_mode=mode), services, nodes=nodes)
    assert {k.rsplit("/", 1)[1]: r.address for k, r in published.items()} == expected
    assert {r.port for r in published.values()} == {30080}


async def test_load_balancer_ingress_and_ingress_hosts_are_registered() -> None:
    services = [
        _service(
            "web",
            type_="LoadBalancer",
            ingress=[{"ip": "198.51.100.7"}, {"hostname": "lb.example"}],
        ),
        _service("api"),
    ]
    ingress = {
        "metadata": {"name": "front", "namespace": "shop"},
        "spec": {
            "tls": [{"hosts": ["secure.example"]}],
            "rules": [
                {
                    "host": "secure.example",
                    "http": {"paths": [{"backend": {"service": {"name": "api"}}}]},
                },
                {
                    "host": "plain.example",
                    "http": {"paths": [{"backend": {"service": {"name": "api"}}}]},
                },
                {
                    "host": "gone.example",
                    "http": {"paths": [{"backend": {"service": {"name": "nope"}}}]},
                },
            ],
        },
    }
    published = await _published(
        ServiceSyncOptions(sync_ingress=True), services, ingresses=[ingress]
    )
    addressed = {k: (r.service, r.address, r.port) for k, r in published.items()}
    assert addressed == {
        "shop/web/lb/198.51.100.7": ("web", "198.51.100.7", 80),
        "shop/web/lb/lb.example": ("web", "lb.example", 80),
        "shop/api": ("api", "10.96.0.10", 80),
        "shop/api/ingress/secure.example": ("api", "secure.example", 443),
        "shop/api/ingress/plain.example": ("api", "plain.example", 80),
    }


def test_bad_options_are_coded_errors_naming_each_setting() -> None:
    with pytest.raises(pr.InvalidConfig) as caught:
        ServiceSyncOptions(
            allow_namespaces="shop,Bad_NS", deny_namespaces=["ok", ""], node_port_mode="sideways"
        )
    error = caught.value
    assert error.code == "INVALID_CONFIG"
    assert {p.path for p in error.problems} == {
        "allow_namespaces[1]",
        "deny_namespaces[1]",
        "node_port_mode",
    }
    assert "external-first" in error.message


def test_deny_wins_over_allow() -> None:
    options = ServiceSyncOptions(allow_namespaces="*", deny_namespaces="secret")
    assert options.namespace_allowed("shop")
    assert not options.namespace_allowed("secret")
    assert not ServiceSyncOptions(allow_namespaces="a", deny_namespaces="a").namespace_allowed("a")


def _cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    script = Path(sys.executable).parent / "pando-runtime"
    return subprocess.run(
        [str(script), *args], capture_output=True, timeout=60, check=False, stdin=subprocess.DEVNULL
    )


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("node_port_mode=sideways", b"node_port_mode: 'sideways' is not one of"),
        ("allow_namespaces=shop,Bad_NS", b"allow_namespaces[1]: 'Bad_NS'"),
        ("colour=blue", b"colour: unknown setting"),
    ],
)
def test_the_command_line_names_a_bad_source_setting(setting: str, named: bytes) -> None:
    result = _cli("catalog", "sync", "--source", "kubernetes", "--source-set", setting)
    assert result.returncode == 2, result.stderr
    assert b"error [INVALID_CONFIG]" in result.stderr
    assert named in result.stderr
