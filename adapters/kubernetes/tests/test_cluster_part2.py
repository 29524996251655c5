"""Part 2 on a real API server: the objects volumes, trials and the edge write, logs since.

kwok runs exec on this machine: a volume helper's ``tar`` runs here (on the directory the
``volume_pool`` fixture names), and a trial's observer reads this machine's socket tables.
"""

# ruff: noqa: ASYNC110, S104
from __future__ import annotations

import io
import logging
import socket
import tarfile
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import anyio.to_thread
import pytest
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import claim_name, edge_object_name, namespace_for

from pando_runtime import (
    AdapterFailed,
    AdapterUnavailable,
    BundlePlan,
    BundleRef,
    BytesReceiveStream,
    EdgePlan,
    EdgePort,
    LogOptions,
    Mount,
    Port,
    TrialRequest,
    VolumePlan,
    VolumeRequest,
    WorkloadPlan,
    WorkloadRef,
    read_all,
)

pytestmark = [pytest.mark.kube, pytest.mark.anyio]
IMAGE = "registry.example/part2/app:1"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def adapter(adapter_config: dict[str, Any]) -> AsyncIterator[KubernetesAdapter]:
    async with KubernetesAdapter(adapter_config) as adapter:
        yield adapter


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _admin(admin_api: Any, api: str, fn: str, *args: Any, **kwargs: Any) -> Any:
    from kubernetes import client  # noqa: PLC0415

    target = getattr(client, api)(admin_api)
    result = await anyio.to_thread.run_sync(lambda: getattr(target, fn)(*args, **kwargs))
    return admin_api.sanitize_for_serialization(result)


async def _helpers(admin_api: Any, ns: str) -> list[str]:
    pods = await _admin(
        admin_api, "CoreV1Api", "list_namespaced_pod", ns, label_selector="pando.dev/role"
    )
    return [p["metadata"]["name"] for p in pods["items"]]


def _tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


async def test_volume_is_a_retained_claim_and_destroy_deletes_it(
    adapter: KubernetesAdapter, admin_api: Any, adapter_config: dict[str, Any]
) -> None:
    bundle_id = _id("vol")
    ns = namespace_for(bundle_id)
    request = VolumeRequest(
        volume_id="Data_1", bundle_id=bundle_id, name="data", size_bytes=64 * 1024**2
    )
    handle = await adapter.create_volume(request)
    try:
        claim = await _admin(
            admin_api,
            "CoreV1Api",
            "read_namespaced_persistent_volume_claim",
            claim_name("Data_1"),
            ns,
        )
        assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
        assert claim["spec"]["storageClassName"] == adapter_config["storage_class"]
        assert claim["spec"]["resources"]["requests"]["storage"] == str(64 * 1024**2)
        assert claim["metadata"]["annotations"]["pando.dev/volume-id"] == "Data_1"
        pv_name = claim["spec"]["volumeName"]
        pv = await _admin(admin_api, "CoreV1Api", "read_persistent_volume", pv_name)
        assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
        observed = await adapter.observe(BundleRef(bundle_id))
        assert not observed.exists, "a volume alone is no deployed bundle"
        assert observed.volume("Data_1").present
    finally:
        await adapter.destroy_volume(handle)
    # The data goes with it: the volume is set to be deleted, or the controller already has.
    left = await _admin(
        admin_api, "CoreV1Api", "list_persistent_volume", field_selector=f"metadata.name={pv_name}"
    )
    assert all(pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete" for pv in left["items"])
    with anyio.fail_after(30):
        while True:
            namespaces = await _admin(admin_api, "CoreV1Api", "list_namespace")
            live = [
                n
                for n in namespaces["items"]
                if n["metadata"]["name"] == ns and not n["metadata"].get("deletionTimestamp")
            ]
            if not live:
                break
            await anyio.sleep(0.2)


async def test_bundle_volumes_are_mounted_and_kept_by_destroy(
    adapter: KubernetesAdapter, admin_api: Any
) -> None:
    bundle_id = _id("mnt")
    ns = namespace_for(bundle_id)
    volume = VolumePlan(volume_id="files", name="files")
    web = WorkloadPlan(name="web", image=IMAGE, mounts=(Mount("files", "/srv/files"),))
    plan = BundlePlan(bundle_id=bundle_id, workloads=(web,), volumes=(volume,))
    await adapter.apply(plan)
    try:
        pods = await _admin(admin_api, "CoreV1Api", "list_namespaced_pod", ns)
        spec = pods["items"][0]["spec"]
        assert {"name": "v0", "persistentVolumeClaim": {"claimName": claim_name("files")}} in [
            {k: v for k, v in vol.items() if k in ("name", "persistentVolumeClaim")}
            for vol in spec["volumes"]
        ]
        mounts = spec["containers"][0]["volumeMounts"]
        assert any(m["mountPath"] == "/srv/files" and m["name"] == "v0" for m in mounts)
        await adapter.destroy(BundleRef(bundle_id))
        with anyio.fail_after(30):  # its pod is stopping until its node confirms the end
            while (observed := await adapter.observe(BundleRef(bundle_id))).exists:
                assert all(w.stopping for w in observed.workloads), observed
                await anyio.sleep(0.1)
        assert observed.volume("files").present
        claim = await _admin(
            admin_api,
            "CoreV1Api",
            "read_namespaced_persistent_volume_claim",
            claim_name("files"),
            ns,
        )
        assert not claim["metadata"].get("deletionTimestamp")
        with anyio.fail_after(30):
            while (await _admin(admin_api, "CoreV1Api", "list_namespaced_pod", ns))["items"]:
                await anyio.sleep(0.2)
        services = await _admin(admin_api, "CoreV1Api", "list_namespaced_service", ns)
        assert services["items"] == []
    finally:
        from pando_runtime import DestroyOptions  # noqa: PLC0415

        await adapter.destroy(BundleRef(bundle_id), DestroyOptions(keep_volumes=False))


async def test_the_helper_is_removed_on_every_path(
    adapter: KubernetesAdapter, admin_api: Any
) -> None:
    bundle_id = _id("hlp")
    ns = namespace_for(bundle_id)
    handle = await adapter.create_volume(
        VolumeRequest(volume_id="v1", bundle_id=bundle_id, name="v1")
    )
    try:
        data = _tar({"a.txt": b"alpha\n", "b.bin": bytes(range(256)) * 100})
        await adapter.restore_volume(handle, BytesReceiveStream(data))
        assert await _helpers(admin_api, ns) == []
        # A restore that fails (a member whose parent is a file: tar exits 2) changes nothing,
        # and the helper still goes. (kwok never closes stdin, so the archive must be whole:
        # on garbage tar would wait for the end of input, which a kubelet delivers.)
        with pytest.raises(AdapterFailed, match="not a valid tar archive"):
            await adapter.restore_volume(
                handle, BytesReceiveStream(_tar({"x": b"file", "x/y": b"under a file"}))
            )
        assert await _helpers(admin_api, ns) == []
        # A snapshot the host abandons midway: cancelled, the helper goes too.
        with anyio.move_on_after(30) as scope:
            async with adapter.snapshot_volume(handle) as stream:
                await stream.receive()
                scope.cancel()
                await anyio.sleep(10)
        assert await _helpers(admin_api, ns) == []
        async with adapter.snapshot_volume(handle) as stream:
            snapshot = await read_all(stream)  # the failed restore left the contents alone
        with tarfile.open(fileobj=io.BytesIO(snapshot)) as archive:
            names = sorted(m.name.removeprefix("./") for m in archive.getmembers() if m.isfile())
            assert names == ["a.txt", "b.bin"]
            extracted = archive.extractfile("./b.bin")
            assert extracted is not None
            assert extracted.read() == bytes(range(256)) * 100
        assert await _helpers(admin_api, ns) == []
    finally:
        await adapter.destroy_volume(handle)


async def test_trial_reports_ports_and_removes_its_namespace(
    adapter: KubernetesAdapter, admin_api: Any
) -> None:
    # kwok's exec runs the observer's `cat /proc/net/tcp` here: a port this test listens on
    # is what the trial must report (routable: bound to every address).
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("0.0.0.0", 0))
    listener.listen()
    port = listener.getsockname()[1]
    trial_id = _id("trial")
    try:
        result = await adapter.trial(
            TrialRequest(trial_id=trial_id, image=IMAGE, env={"A": "1"}, timeout_seconds=10)
        )
    finally:
        listener.close()
    assert result.started
    assert Port(port) in result.observed_ports
    assert result.observed_writes == ()
    assert len(result.log) <= 64 * 1024
    assert all(p not in result.observed_ports for p in result.loopback_ports)
    namespaces = await _admin(admin_api, "CoreV1Api", "list_namespace")
    mine = [n for n in namespaces["items"] if n["metadata"]["name"] == f"pando-trial-{trial_id}"]
    assert all(n["metadata"].get("deletionTimestamp") for n in mine), "the namespace is removed"


async def test_edge_objects_and_the_only_public_service(
    adapter: KubernetesAdapter, admin_api: Any, adapter_config: dict[str, Any]
) -> None:
    name = _id("edge")
    obj = edge_object_name(name)
    ns = adapter_config["edge_namespace"]
    plan = EdgePlan(
        name=name,
        image=IMAGE,
        env={"TOKEN": "edge-secret-value"},
        ports=(EdgePort(published=30080, target=80),),
        mounts=(),
    )
    await adapter.apply_edge(plan)
    try:
        calls = adapter.api_calls
        await adapter.apply_edge(plan)
        assert adapter.api_calls - calls <= 1, "an unchanged edge is read, not written"
        deployment = await _admin(admin_api, "AppsV1Api", "read_namespaced_deployment", obj, ns)
        assert deployment["spec"]["replicas"] >= 2
        assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
        spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert spread[0]["whenUnsatisfiable"] == "ScheduleAnyway"
        assert "edge-secret-value" not in str(deployment)
        pdb = await _admin(
            admin_api, "PolicyV1Api", "read_namespaced_pod_disruption_budget", obj, ns
        )
        assert pdb["spec"]["minAvailable"] == 1
        service = await _admin(admin_api, "CoreV1Api", "read_namespaced_service", obj, ns)
        assert service["spec"]["type"] == "NodePort"
        assert service["spec"]["externalTrafficPolicy"] == "Local"
        assert service["spec"]["ports"][0]["nodePort"] == 30080
        everything = await _admin(
            admin_api,
            "CoreV1Api",
            "list_service_for_all_namespaces",
            label_selector="app.kubernetes.io/managed-by=pando",
        )
        public = [
            s["metadata"]["namespace"]
            for s in everything["items"]
            if s["spec"]["type"] in ("NodePort", "LoadBalancer")
        ]
        assert public
        assert set(public) == {ns}, "no NodePort or LoadBalancer outside the edge"
        with anyio.fail_after(30):
            while not (await adapter.observe_edge(name)).running:
                await anyio.sleep(0.2)
        assert name in await adapter.edges()
    finally:
        await adapter.remove_edge(name)
    state = await adapter.observe_edge(name)
    assert not state.present
    left = await _admin(
        admin_api, "CoreV1Api", "list_namespaced_secret", ns, label_selector=f"pando.dev/edge={obj}"
    )
    assert left["items"] == []


async def test_edge_that_cannot_be_placed_says_why(adapter_config: dict[str, Any]) -> None:
    config = {**adapter_config, "node_selector": {"pando.dev/no-such-node": "x"}}
    name = _id("stuck")
    async with KubernetesAdapter(config) as adapter:
        await adapter.apply_edge(EdgePlan(name=name, image=IMAGE, replicas=2))
        try:
            state = None
            with anyio.fail_after(30):
                while True:
                    state = await adapter.observe_edge(name)
                    if "nodes are available" in state.detail:
                        break
                    await anyio.sleep(0.3)
            assert state.present
            assert not state.running
            assert state.detail.startswith("0 of 2 replicas ready: pod ")
            assert "nodes are available" in state.detail
        finally:
            await adapter.remove_edge(name)


async def test_logs_since_drops_older_lines(adapter: KubernetesAdapter, kube_cluster: Any) -> None:
    from localcluster import cri_log_line  # noqa: PLC0415

    bundle_id = _id("logs")
    plan = BundlePlan(bundle_id=bundle_id, workloads=(WorkloadPlan(name="web", image=IMAGE),))
    await adapter.apply(plan)
    try:
        now = datetime.now(UTC)
        tag = uuid.uuid4().hex[:6]
        with kube_cluster.logs_file.open("a") as log:
            log.write(cri_log_line(f"old-{tag}", when=now - timedelta(hours=1)))
            log.write(cri_log_line(f"new-{tag}", when=now))
        ref = WorkloadRef(bundle_id, "web")
        async with adapter.logs(ref, LogOptions(since=now - timedelta(milliseconds=1))) as stream:
            with anyio.fail_after(30):
                text = await read_all(stream)
        assert f"new-{tag}".encode() in text
        assert f"old-{tag}".encode() not in text
    finally:
        await adapter.destroy(BundleRef(bundle_id))


async def test_the_network_policy_canary_cannot_verify_a_cluster_without_network(
    adapter_config: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    # kwok runs pods without a network: the probes never finish, so enforcement stays unverified.
    config = {**adapter_config, "trust_network_policy": False, "canary_wait": 4.0}
    caplog.set_level(logging.INFO, logger="pando_runtime.kubernetes")
    async with KubernetesAdapter(config) as untrusting:
        with pytest.raises(AdapterUnavailable, match="could not be verified") as refused:
            await untrusting.health_check()
        said = {(r.name, r.levelname, r.getMessage().split(":")[0]) for r in caplog.records}
        assert (
            "pando_runtime.kubernetes.canary",
            "WARNING",
            "the NetworkPolicy canary failed",
        ) in (said), "the canary's result is logged"
        connected = next(r for r in caplog.records if r.name.endswith(".session"))
        assert connected.getMessage().startswith("connected to cluster ")
        assert connected.levelname == "INFO"
        assert "trust_network_policy" in (refused.value.remedy or "")
        assert (await untrusting.capabilities()).private_network is False
        api = await untrusting.session.connection.transport()  # what the canary left behind
        left = await api.get(
            "/api/v1/namespaces", labelSelector="pando.dev/role=network-policy-canary"
        )
        for namespace in left.get("items") or ():
            assert namespace["metadata"].get("deletionTimestamp"), "the canary is deleted"
