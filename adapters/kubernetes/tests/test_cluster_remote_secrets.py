"""Clusters from remote secrets, on two then three local control planes, while the adapter runs.

The kubeconfig names only the second (small) cluster, the default, which holds the remote
secrets; the first (roomier) cluster joins from an Istio remote secret, so a first deploy goes
there. One walk-through on the same control planes (each behaviour once, the CI's minutes
counted): a cluster joined from a Secret; its client certificate rotated while the event stream
flows (replaced, no ``MISSED``); a third control plane joining from a Cluster API Secret; a
duplicate name and a kubeconfig with an exec plugin refused, the rest untouched, no credential
in an event or a log record; an unreachable cluster joining, holding up nothing, and leaving; a
restarted adapter rebuilding the same fleet from the Secrets; the Secret removed (its apps
unavailable, naming it; nothing written to that cluster afterwards, by its API server's audit
log).
"""

from __future__ import annotations

import base64
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
import yaml
from pando_runtime_kubernetes._multi import MultiClusterAdapter

from pando_runtime import (
    AdapterUnavailable,
    BundleEvent,
    BundleEventKind,
    BundlePlan,
    BundleRef,
    DestroyOptions,
    Resources,
    WorkloadPlan,
)

pytestmark = [pytest.mark.kube, pytest.mark.anyio]

NAMESPACE = "pando-remote-secrets"
LABELS = {"istio/multiCluster": "true"}
REMOTE = "roomy"
"""The first cluster's name as the Secrets give it."""
THIRD = "third"
"""The third cluster's name, as its Cluster API Secret gives it."""
CLUSTER_API_LABEL = "cluster.x-k8s.io/cluster-name"
MiB = 1024**2


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the mechanism is the core's, shown on both backends there


def _plan(prefix: str, *, first_deploy: bool = True) -> BundlePlan:
    web = WorkloadPlan(
        name="web",
        image="registry.example/remote/app:1",
        resources=Resources(cpu_millis=50, memory_bytes=64 * MiB),
    )
    bundle_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    return BundlePlan(bundle_id=bundle_id, workloads=(web,), first_deploy=first_deploy)


def _secret(
    core: Any, name: str, data: dict[str, bytes], labels: dict[str, str] | None = None
) -> None:
    """Create or replace Secret ``name`` with ``data`` (as an operator would)."""
    from kubernetes import client  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name=name, labels=labels or LABELS),
        data={k: base64.b64encode(v).decode() for k, v in data.items()},
    )
    try:
        core.create_namespaced_secret(NAMESPACE, body)
    except ApiException as error:
        if error.status != 409:
            raise
        core.replace_namespaced_secret(name, NAMESPACE, body)


@pytest.fixture(scope="module")
def secrets_home(second_admin_api: Any, second_kube_cluster: Any) -> Iterator[Any]:
    """The namespace of the remote secrets on the default cluster, its Role bound there only."""
    from kubeadmin import grant_role_in  # noqa: PLC0415
    from kubernetes import client  # noqa: PLC0415

    core = client.CoreV1Api(second_admin_api)
    grant_role_in(
        second_admin_api,
        NAMESPACE,
        "pando-runtime-remote-secrets",
        second_kube_cluster.restricted_user,
    )
    yield core
    core.delete_namespace(NAMESPACE)


@pytest.fixture(scope="module")
def third_cluster(second_kube_cluster: Any) -> Iterator[Any]:
    """A third control plane for this module, its restricted user bound to the adapter's roles."""
    from kubeadmin import admin_client, grant_adapter  # noqa: PLC0415
    from localcluster.backends import local_backend  # noqa: PLC0415
    from localcluster.pytest_plugin import SMALL_NODES  # noqa: PLC0415

    with local_backend("pando-local-3", SMALL_NODES) as cluster:
        with admin_client(cluster.kubeconfig, context=cluster.context) as api:
            grant_adapter(api, cluster.restricted_user)
        yield cluster


@pytest.fixture(scope="module")
def remote_config(
    adapter_config: dict[str, Any], second_adapter_config: dict[str, Any]
) -> dict[str, Any]:
    per_member = ("kubeconfig", "helper_mount_root")
    return {
        "kubeconfig": second_adapter_config["kubeconfig"],
        "remote_secrets_namespace": NAMESPACE,
        "join_wait": 10.0,  # an unreachable cluster's cost; a real one starts in about 1 s
        "settings": {k: v for k, v in second_adapter_config.items() if k not in per_member},
        "clusters": {REMOTE: {"helper_mount_root": adapter_config["helper_mount_root"]}},
    }


def _rotated(kube_cluster: Any, directory: Path) -> bytes:
    """The first cluster's restricted kubeconfig with a newly issued client certificate."""
    from localcluster.kubeconfig import write_kubeconfig  # noqa: PLC0415
    from localcluster.pki import issue_client_cert  # noqa: PLC0415

    local = kube_cluster.local
    if local is None:
        pytest.skip("rotating a client certificate needs the local backend")
    pki = local._pki
    user = kube_cluster.restricted_user
    fresh = issue_client_cert(pki, f"{user}-rotated-{uuid.uuid4().hex[:6]}", f"/CN={user}")
    doc = yaml.safe_load(Path(kube_cluster.restricted_kubeconfig).read_text())
    path = write_kubeconfig(
        directory / "rotated.kubeconfig",
        server=doc["clusters"][0]["cluster"]["server"],
        ca_cert=pki.ca.cert,
        user=doc["users"][0]["name"],
        context=doc["current-context"],
        cluster=doc["clusters"][0]["name"],
        client_cert=fresh.cert,
        client_key=fresh.key,
    )
    return path.read_bytes()


def _unreachable(kubeconfig: bytes) -> bytes:
    """``kubeconfig`` pointing at a loopback port where nothing listens."""
    import socket  # noqa: PLC0415

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    doc = yaml.safe_load(kubeconfig)
    doc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    return yaml.safe_dump(doc).encode()


def _with_exec_plugin(kubeconfig: bytes) -> bytes:
    doc = yaml.safe_load(kubeconfig)
    doc["users"][0]["user"] = {"exec": {"apiVersion": "v1", "command": "/bin/true"}}
    return yaml.safe_dump(doc).encode()


async def _next_change(events: AsyncIterator[BundleEvent]) -> dict[str, str]:
    """The next ``FLEET_CHANGED`` event's details; nothing on the way was ``MISSED``."""
    with anyio.fail_after(90):
        async for event in events:
            assert event.kind is not BundleEventKind.MISSED, "a member change lost events"
            if event.kind is BundleEventKind.FLEET_CHANGED:
                return event.details
    pytest.fail("the event stream ended")


async def _running(adapter: MultiClusterAdapter, plan: BundlePlan) -> None:
    with anyio.fail_after(90):
        while True:  # polls the cluster's own state
            if (await adapter.observe(BundleRef(plan.bundle_id))).all_running:
                return
            await anyio.sleep(0.5)


async def _third_joins(
    adapter: MultiClusterAdapter,
    events: AsyncIterator[BundleEvent],
    secrets_home: Any,
    third_cluster: Any,
) -> None:
    third = await anyio.Path(third_cluster.restricted_kubeconfig).read_bytes()
    labels = {CLUSTER_API_LABEL: THIRD}
    await anyio.to_thread.run_sync(
        _secret, secrets_home, f"{THIRD}-kubeconfig", {"value": third}, labels
    )
    assert await _next_change(events) == {"change": "joined", "cluster": THIRD}
    assert THIRD in (await adapter.capacity()).details["clusters"].split(",")


async def _unreachable_joins(
    adapter: MultiClusterAdapter,
    events: AsyncIterator[BundleEvent],
    secrets_home: Any,
    kubeconfig: bytes,
    plan: BundlePlan,
) -> None:
    """An unreachable cluster joins (its adapter opens; its lists are retried), holding up
    nothing: the others answer, a first deploy goes to one of them (it has no room to show);
    its Secret removed, it leaves."""
    await anyio.to_thread.run_sync(
        _secret, secrets_home, "dark", {"dark": _unreachable(kubeconfig)}
    )
    joined = await _next_change(events)
    assert (joined["change"], joined["cluster"]) == ("joined", "dark")
    assert (await adapter.observe(BundleRef(plan.bundle_id))).all_running
    beside = _plan("beside")
    assert (await adapter.apply(beside)).details["cluster"] != "dark"
    await adapter.destroy(BundleRef(beside.bundle_id), DestroyOptions(keep_volumes=False))
    await anyio.to_thread.run_sync(secrets_home.delete_namespaced_secret, "dark", NAMESPACE)
    assert (await _next_change(events))["change"] == "left"
    assert "dark" not in adapter.fleet.members


async def test_clusters_join_rotate_are_refused_and_leave_from_remote_secrets(  # noqa: PLR0917 - fixtures
    remote_config: dict[str, Any],
    secrets_home: Any,
    kube_cluster: Any,
    adapter_config: dict[str, Any],
    third_cluster: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    first = await anyio.Path(kube_cluster.restricted_kubeconfig).read_bytes()
    await anyio.to_thread.run_sync(_secret, secrets_home, "fleet", {REMOTE: first})
    rotated = await anyio.to_thread.run_sync(_rotated, kube_cluster, tmp_path)
    plan = _plan("remote")
    async with MultiClusterAdapter(remote_config) as adapter, adapter.watch_bundles() as events:
        assert (await anext(events)).kind is BundleEventKind.WATCHING
        assert REMOTE in adapter.fleet.members  # joined before the adapter answered
        handle = await adapter.apply(plan)
        assert handle.details["cluster"] == REMOTE  # the roomier cluster, from its Secret
        await _running(adapter, plan)

        # A rotated client certificate: replaced make-before-break while the stream flows.
        serving = adapter.fleet.members[REMOTE]
        await anyio.to_thread.run_sync(_secret, secrets_home, "fleet", {REMOTE: rotated})
        assert await _next_change(events) == {"change": "replaced", "cluster": REMOTE}
        assert adapter.fleet.members[REMOTE] is not serving
        assert (await adapter.observe(BundleRef(plan.bundle_id))).all_running

        # A third control plane joins from a Cluster API Secret (label and key 'value').
        await _third_joins(adapter, events, secrets_home, third_cluster)

        # A name taken by another Secret and an exec plugin: refused, the rest untouched.
        bad = {REMOTE: first, "plugged": _with_exec_plugin(first)}
        await anyio.to_thread.run_sync(_secret, secrets_home, "other", bad)
        refused = {(await _next_change(events))["cluster"] for _ in range(2)}
        assert refused == {REMOTE, "plugged"}
        assert adapter.fleet.members[REMOTE] is not serving
        assert "plugged" not in adapter.fleet.members
        assert (await adapter.observe(BundleRef(plan.bundle_id))).exists

        await _unreachable_joins(adapter, events, secrets_home, first, plan)

        # A restarted host rebuilds the same fleet from the Secrets and finds the app there.
        async with MultiClusterAdapter(remote_config) as restarted:
            assert set(restarted.fleet.members) == set(adapter.fleet.members)
            assert await restarted.locate(plan.bundle_id) == REMOTE

        # Removed: the app is unavailable naming its cluster, and nothing is written there.
        await anyio.to_thread.run_sync(secrets_home.delete_namespaced_secret, "other", NAMESPACE)
        await anyio.to_thread.run_sync(secrets_home.delete_namespaced_secret, "fleet", NAMESPACE)
        assert await _next_change(events) == {
            "change": "left",
            "cluster": REMOTE,
            "reason": "1 bundles unavailable",
        }
        removed_at = time.time()
        with pytest.raises(AdapterUnavailable) as caught:
            await adapter.observe(BundleRef(plan.bundle_id))
        assert caught.value.details["cluster"] == REMOTE
        elsewhere = _plan("after")
        assert (await adapter.apply(elsewhere)).details["cluster"] != REMOTE
        await adapter.destroy(BundleRef(elsewhere.bundle_id), DestroyOptions(keep_volumes=False))

    from localcluster import read_audit_log  # noqa: PLC0415

    user = kube_cluster.restricted_user
    ours = [r for r in read_audit_log(kube_cluster.local.audit_log) if r.user == user]
    assert [r for r in ours if r.time <= removed_at], "the audit log shows the app's writes"
    assert not [r for r in ours if r.time > removed_at], "written to a cluster after it left"

    # Credentials never in a log record (nor, above, in an event: only names and reasons).
    key_data = yaml.safe_load(rotated)["users"][0]["user"]["client-key-data"]
    assert not [r for r in caplog.records if key_data[:40] in r.getMessage()]

    from pando_runtime_kubernetes import KubernetesAdapter  # noqa: PLC0415

    async with KubernetesAdapter(adapter_config) as own:
        await own.destroy(BundleRef(plan.bundle_id), DestroyOptions(keep_volumes=False))
