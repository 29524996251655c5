"""Catalog sync on the local control plane and a real Consul: Services and bundles.

The Service source runs as the restricted identity with only the catalog-sync ClusterRole of
``deploy/catalog-sync-rbac.yaml`` added, so the RBAC file is tested too.
"""

# ruff: noqa: ASYNC110
from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import attrs
import httpx
import pytest
import yaml
from localconsul.pytest_plugin import node_services
from pando_runtime_consul import ConsulCatalog, ConsulConfig
from pando_runtime_kubernetes import (
    ClusterSet,
    KubernetesAdapter,
    KubeTransport,
    ServiceSource,
    ServiceSyncOptions,
)

import pando_runtime as pr

pytestmark = [pytest.mark.kube, pytest.mark.consul, pytest.mark.anyio]

RBAC = Path(__file__).resolve().parents[1] / "deploy" / "catalog-sync-rbac.yaml"
BINDING = "pando-runtime-catalog-sync-tests"


@pytest.fixture(scope="module")
def sync_identity(
    kube_cluster: Any, admin_api: Any, adapter_config: dict[str, Any]
) -> Iterator[str]:
    """The restricted kubeconfig, granted the catalog-sync ClusterRole."""
    from kubernetes import client  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    rbac = client.RbacAuthorizationV1Api(admin_api)
    role = yaml.safe_load(RBAC.read_text())
    try:
        rbac.create_cluster_role(role)
    except ApiException as error:
        if error.status != 409:
            raise
        rbac.replace_cluster_role(role["metadata"]["name"], role)
    binding = {
        "metadata": {"name": BINDING},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role["metadata"]["name"],
        },
        "subjects": [
            {
                "kind": "User",
                "apiGroup": "rbac.authorization.k8s.io",
                "name": kube_cluster.restricted_user,
            }
        ],
    }
    try:
        rbac.create_cluster_role_binding(binding)
    except ApiException as error:
        if error.status != 409:
            raise
    try:
        yield str(adapter_config["kubeconfig"])
    finally:
        rbac.delete_cluster_role_binding(BINDING)


@pytest.fixture
async def transport(sync_identity: str) -> AsyncIterator[KubeTransport]:
    clusters = await anyio.to_thread.run_sync(lambda: ClusterSet.load(sync_identity))
    api = KubeTransport.for_cluster(clusters.cluster())
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
async def consul(consul_agent: Any) -> AsyncIterator[ConsulCatalog]:
    backend = ConsulCatalog(ConsulConfig(address=consul_agent.http_address))
    try:
        yield backend
    finally:
        await backend.aclose()


async def _until(
    consul_http: httpx.AsyncClient, node: str, check: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """Poll Consul until ``check`` holds for the node's services (a guard bounds it)."""
    with anyio.fail_after(60):
        while not check(found := await node_services(consul_http, node)):
            await anyio.sleep(0.1)
    return found


async def _admin(admin_api: Any, api: str, fn: str, *args: Any, **kwargs: Any) -> Any:
    from kubernetes import client  # noqa: PLC0415

    target = getattr(client, api)(admin_api)
    return await anyio.to_thread.run_sync(lambda: getattr(target, fn)(*args, **kwargs))


def _service(
    name: str, *, port: int = 80, type_: str = "ClusterIP", **annotations: str
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "type": type_,
            "ports": [{"name": "http", "port": port}],
            "selector": {"app": name},
        },
    }


@pytest.fixture
async def namespaces(admin_api: Any) -> AsyncIterator[tuple[str, str]]:
    """An allowed and a denied namespace of this test's own."""
    suffix = uuid.uuid4().hex[:6]
    names = (f"cat-ok-{suffix}", f"cat-no-{suffix}")
    for name in names:
        await _admin(admin_api, "CoreV1Api", "create_namespace", {"metadata": {"name": name}})
    try:
        yield names
    finally:
        for name in names:
            await _admin(admin_api, "CoreV1Api", "delete_namespace", name)


async def test_services_appear_follow_changes_and_leave_consul(
    transport: KubeTransport,
    consul: ConsulCatalog,
    consul_http: httpx.AsyncClient,
    admin_api: Any,
    namespaces: tuple[str, str],
) -> None:
    allowed, denied = namespaces
    node = f"k8s-{uuid.uuid4().hex[:8]}"
    core = "CoreV1Api"
    await _admin(admin_api, core, "create_namespaced_service", allowed, _service("web"))
    await _admin(
        admin_api,
        core,
        "create_namespaced_service",
        allowed,
        _service("hidden", **{"pando.dev/catalog-sync": "false"}),
    )
    await _admin(admin_api, core, "create_namespaced_service", denied, _service("web"))
    options = ServiceSyncOptions(
        allow_namespaces=f"{allowed},{denied}",
        deny_namespaces=denied,
        node=node,
        node_port_mode="internal-only",
        prefix="k-",
    )
    syncer = pr.catalog.CatalogSyncer(consul, nodes=(node,), resync_interval=1.0, reap_interval=1.0)
    source = ServiceSource(transport, syncer, options)
    web_id = f"{allowed}/web"
    async with syncer.running(), source.running():
        found = await _until(consul_http, node, lambda ids: web_id in ids)
        assert set(found) == {web_id}, "denied namespace and disabled Service left out"
        web = found[web_id]
        assert (web["Service"], web["Port"]) == ("k-web", 80)
        cluster_ip = (
            await _admin(admin_api, core, "read_namespaced_service", "web", allowed)
        ).spec.cluster_ip
        assert web["Address"] == cluster_ip
        assert source.services.has_synced
        assert source.services.last_sync_resource_version

        patch = [{"op": "replace", "path": "/spec/ports/0/port", "value": 8080}]  # a JSON patch
        await _admin(admin_api, core, "patch_namespaced_service", "web", allowed, patch)
        await _until(consul_http, node, lambda ids: ids.get(web_id, {}).get("Port") == 8080)

        edit = {
            "Node": node,
            "Address": "127.0.0.1",
            "Service": {
                "ID": web_id,
                "Service": "k-web",
                "Address": "192.0.2.1",
                "Port": 1,
                "Tags": ["k8s", pr.catalog.CATALOG_OWNER_TAG],
            },
        }
        assert (await consul_http.put("/v1/catalog/register", json=edit)).status_code == 200
        await syncer.wait_full_sync()
        assert (await node_services(consul_http, node))[web_id]["Port"] == 8080, (
            "the external edit is overwritten"
        )

        await _admin(
            admin_api, core, "create_namespaced_service", allowed, _service("np", type_="NodePort")
        )
        nodes = (await _admin(admin_api, core, "list_node")).items
        internal = {
            n.metadata.name: a.address
            for n in nodes
            for a in n.status.addresses or ()
            if a.type == "InternalIP"
        }
        expected = {f"{allowed}/np/node/{name}" for name in internal}
        found = await _until(consul_http, node, lambda ids: expected <= set(ids))
        np = {k.rsplit("/", 1)[1]: s for k, s in found.items() if k.startswith(f"{allowed}/np/")}
        assert {name: s["Address"] for name, s in np.items()} == internal
        assert len({s["Port"] for s in np.values()}) == 1

        await _admin(admin_api, core, "delete_namespaced_service", "web", allowed)
        await _until(consul_http, node, lambda ids: web_id not in ids)
    assert syncer.status.healthy


async def test_explicit_enable_and_a_restart_with_a_full_catalog(
    transport: KubeTransport,
    consul: ConsulCatalog,
    consul_http: httpx.AsyncClient,
    admin_api: Any,
    namespaces: tuple[str, str],
) -> None:
    allowed, _ = namespaces
    node = f"k8s-{uuid.uuid4().hex[:8]}"
    for service in (_service("plain"), _service("opted", **{"pando.dev/catalog-sync": "true"})):
        await _admin(admin_api, "CoreV1Api", "create_namespaced_service", allowed, service)
    options = ServiceSyncOptions(allow_namespaces=allowed, default_sync=False, node=node)
    for _run in range(2):  # the second run starts with the catalog full
        syncer = pr.catalog.CatalogSyncer(
            consul, nodes=(node,), resync_interval=0.5, reap_interval=0
        )
        source = ServiceSource(transport, syncer, options)
        before = dict(consul.requests)
        async with syncer.running(), source.running():
            found = await _until(consul_http, node, lambda ids: f"{allowed}/opted" in ids)
            await syncer.wait_full_sync()
            await syncer.wait_full_sync()
        assert set(found) == {f"{allowed}/opted"}
    for write in ("txn", "catalog/deregister", "catalog/register"):  # the syncer writes by txn
        assert consul.requests[write] == before.get(write, 0), "the restarted syncer wrote nothing"
    assert await pr.catalog.CatalogSyncer(consul, nodes=(node,)).cleanup() == 1


async def test_bundles_of_the_kubernetes_adapter_appear_and_disappear(
    adapter_config: dict[str, Any], consul: ConsulCatalog, consul_http: httpx.AsyncClient
) -> None:
    node = f"bundles-{uuid.uuid4().hex[:8]}"
    bundle_id = f"Cat_{uuid.uuid4().hex[:6]}"
    plan = pr.BundlePlan(
        bundle_id=bundle_id,
        workloads=(
            pr.WorkloadPlan(name="web", image="registry.example/cat:1", ports=(pr.Port(8080),)),
        ),
    )
    async with KubernetesAdapter(adapter_config) as adapter:
        syncer = pr.catalog.CatalogSyncer(consul, nodes=(node,), resync_interval=1.0)
        source = pr.catalog.BundleSource(adapter, syncer, node=node)
        async with syncer.running(), source.running():
            source.track(plan)
            await adapter.apply(plan)
            try:
                found = await _until(consul_http, node, lambda ids: len(ids) == 1)
                (service,) = found.values()
                url = adapter.upstream(pr.WorkloadRef(bundle_id, "web"), 8080).url
                assert url == f"http://{service['Address']}:{service['Port']}"
                assert service["Meta"]["pando-adapter"] == "kubernetes"
            finally:
                await adapter.destroy(pr.BundleRef(bundle_id))
            await _until(consul_http, node, lambda ids: not ids)


async def test_the_command_line_syncs_a_clusters_services_once(
    sync_identity: str,
    consul_agent: Any,
    consul_http: httpx.AsyncClient,
    admin_api: Any,
    namespaces: tuple[str, str],
) -> None:
    allowed, _ = namespaces
    node = f"cli-{uuid.uuid4().hex[:8]}"
    await _admin(admin_api, "CoreV1Api", "create_namespaced_service", allowed, _service("web"))
    argv = [
        str(Path(sys.executable).parent / "pando-runtime"),
        "catalog", "sync", "--once", "--source", "kubernetes",
        "--source-set", f"kubeconfig={sync_identity}",
        "--source-set", f"allow_namespaces={allowed}",
        "--source-set", f"node={node}",
        "--catalog-set", f"address={consul_agent.http_address}",
        "--node", node,
    ]  # fmt: skip
    result = await anyio.to_thread.run_sync(
        lambda: subprocess.run(argv, capture_output=True, timeout=120, check=False)
    )
    assert result.returncode == 0, result.stderr
    assert f"registered {node}/{allowed}/web (web at ".encode() in result.stdout
    assert set(await node_services(consul_http, node)) == {f"{allowed}/web"}


# -- catalog sync as a singleton across three replica processes ---------------------------

LEASES = "pando"  # the adapter's server_namespace, where the replicas' Leases are
LEASE, RENEW, RETRY = 4.0, 3.0, 1.0
_log = logging.getLogger(__name__)


@attrs.define
class _Replicas:
    """Three ``catalog sync --replica`` processes of one singleton, and what Consul saw."""

    argv: list[str]
    out: Path
    node: str
    singleton: str
    processes: dict[str, subprocess.Popen[bytes]] = attrs.Factory(dict)
    versions: set[tuple[int, str, str | None]] = attrs.Factory(set)
    """``(ModifyIndex, service id, writer)`` of each registration version Consul showed."""

    def start(self, replica: str) -> None:
        log = (self.out / f"{replica}.out").open("wb")
        self.processes[replica] = subprocess.Popen(
            [*self.argv, "--replica", replica], stdout=log, stderr=subprocess.STDOUT
        )

    def output(self, replica: str) -> str:
        return (self.out / f"{replica}.out").read_text()

    async def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            await anyio.to_thread.run_sync(lambda p=process: p.wait(timeout=60))

    async def follow(self, consul_http: httpx.AsyncClient, node: str) -> None:
        """Follow the node's services with Consul's blocking queries: each version, in order."""
        index = "0"
        while True:
            response = await consul_http.get(
                f"/v1/catalog/node-services/{node}",
                params={"index": index, "wait": "2s"},
                timeout=30,
            )
            index = response.headers.get("X-Consul-Index", index)
            for service in (response.json() or {}).get("Services") or ():
                writer = (service.get("Meta") or {}).get(pr.catalog.CATALOG_WRITER_META)
                self.versions.add((service["ModifyIndex"], service["ID"], writer))

    def writer_runs(self) -> list[str | None]:
        """The writers in Consul's order of the writes, each run of one writer once."""
        order = [writer for _, _, writer in sorted(self.versions)]
        return [w for i, w in enumerate(order) if i == 0 or order[i - 1] != w]


async def _holder(admin_api: Any, singleton: str) -> str:
    lease = await _admin(
        admin_api, "CoordinationV1Api", "read_namespaced_lease", f"pando-singleton-{singleton}",
        LEASES,
    )  # fmt: skip
    return str(lease.spec.holder_identity)


async def _remove_leases(admin_api: Any, names: list[str]) -> None:
    """Delete the Leases the killed replicas left (other tests count Lease calls)."""
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    for name in names:
        for prefix in ("pando-replica-", "pando-singleton-"):
            try:
                await _admin(
                    admin_api, "CoordinationV1Api", "delete_namespaced_lease", prefix + name, LEASES
                )
            except ApiException as error:
                if error.status != 404:
                    raise


@pytest.fixture
def replicas(
    sync_identity: str,
    adapter_config: dict[str, Any],
    consul_agent: Any,
    namespaces: tuple[str, str],
    tmp_path: Path,
) -> _Replicas:
    suffix = uuid.uuid4().hex[:6]
    config = tmp_path / "adapter.yaml"
    config.write_text(yaml.safe_dump(dict(adapter_config)))
    argv = [
        str(Path(sys.executable).parent / "pando-runtime"),
        "--adapter", "kubernetes", "--config", str(config),
        "catalog", "sync", "--source", "kubernetes",
        "--source-set", f"kubeconfig={sync_identity}",
        "--source-set", f"allow_namespaces={namespaces[0]}",
        "--source-set", f"node=rep-{suffix}",
        "--catalog-set", f"address={consul_agent.http_address}",
        "--node", f"rep-{suffix}", "--resync", "1", "--singleton", f"catalog-{suffix}",
        "--lease-duration", str(LEASE), "--renew-deadline", str(RENEW),
        "--retry-period", str(RETRY),
    ]  # fmt: skip
    return _Replicas(argv=argv, out=tmp_path, node=f"rep-{suffix}", singleton=f"catalog-{suffix}")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_three_replica_processes_sync_under_one_singleton_and_survive_kills(
    replicas: _Replicas, consul_http: httpx.AsyncClient, admin_api: Any, namespaces: tuple[str, str]
) -> None:
    allowed, _ = namespaces
    node, singleton = replicas.node, replicas.singleton
    names = [f"{singleton}-{x}" for x in "abc"]
    await _admin(admin_api, "CoreV1Api", "create_namespaced_service", allowed, _service("web-0"))
    for name in names:
        replicas.start(name)
    holders: list[str] = []
    resumed: list[float] = []
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(replicas.follow, consul_http, node)
            for n in range(3):
                found = await _until(
                    consul_http, node, lambda ids, n=n: f"{allowed}/web-{n}" in ids
                )
                holders.append(found[f"{allowed}/web-{n}"]["Meta"][pr.catalog.CATALOG_WRITER_META])
                assert await _holder(admin_api, singleton) == holders[-1], "the holder wrote"
                if n < 2:
                    # SIGKILL the leader: it releases nothing; a successor takes over once the
                    # Lease has expired, does a full pass and writes the next Service.
                    replicas.processes[holders[-1]].send_signal(signal.SIGKILL)
                    killed = time.monotonic()
                    new = _service(f"web-{n + 1}")
                    await _admin(admin_api, "CoreV1Api", "create_namespaced_service", allowed, new)
                    await _until(
                        consul_http, node, lambda ids, n=n: f"{allowed}/web-{n + 1}" in ids
                    )
                    resumed.append(time.monotonic() - killed)
            group.cancel_scope.cancel()
        final = await node_services(consul_http, node)
    finally:
        await replicas.stop()
        await consul_http.put("/v1/catalog/deregister", json={"Node": node})
        await _remove_leases(admin_api, [*names, singleton])

    # A figure, not an assertion: from the kill to the successor's write of the new Service.
    _log.warning("catalog singleton takeovers after SIGKILL: %s s", resumed)
    assert len(set(holders)) == 3, f"each kill handed over to another replica: {holders}"
    assert replicas.writer_runs() == holders, "one writer at a time, none coming back"
    # Nothing lost, nothing twice: exactly the three Services, each once, tagged as owned.
    assert set(final) == {f"{allowed}/web-{n}" for n in range(3)}
    assert all(pr.catalog.CATALOG_OWNER_TAG in s["Tags"] for s in final.values())
    # Each replica reports only its own writes: the waiting ones wrote nothing.
    for n, holder in enumerate(holders):
        out = replicas.output(holder)
        wrote = {m for m in range(3) if f"registered {node}/{allowed}/web-{m} " in out}
        assert wrote == {n}, out
