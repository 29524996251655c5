"""The admission backstop (deploy/admission.yaml) on a real API server.

The module installs the shipped policies as an installer would (parameters naming the
adapter's test identity and the edge namespace), then checks that each forbidden object an
administrator creates is denied with the policy's message, and that what the adapter itself
writes (apps, volumes and their helper, trials, the canary, the edge, egress gateways) is
admitted. The policies are removed at the end, so other modules' administrator actions are
not affected.
"""

from __future__ import annotations

import io
import tarfile
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import anyio.to_thread
import pytest
from _admin_calls import core_call
from _admission import IMAGE, installed_admission, probe_pod, probe_service
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import namespace_for

from pando_runtime import (
    AdapterUnavailable,
    BundlePlan,
    BundleRef,
    BytesReceiveStream,
    CarriedFile,
    DestroyOptions,
    EdgePlan,
    EdgePort,
    EgressPolicy,
    EgressRule,
    Mount,
    NetworkPlan,
    Port,
    TrialRequest,
    VolumePlan,
    WorkloadPlan,
    read_all,
)

pytestmark = [pytest.mark.kube, pytest.mark.anyio, pytest.mark.every_minor]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def installed(
    kube_cluster: Any, admin_api: Any, adapter_config: dict[str, Any]
) -> Iterator[tuple[list[dict[str, Any]], str]]:
    """The shipped policies and bindings, installed and enforcing; removed afterwards."""
    with installed_admission(
        admin_api, kube_cluster.restricted_user, adapter_config["edge_namespace"]
    ) as installed:
        yield installed


@pytest.fixture(scope="module")
def backstop(installed: tuple[list[dict[str, Any]], str]) -> list[dict[str, Any]]:
    return installed[0]


@pytest.fixture(scope="module")
def probe_namespace(installed: tuple[list[dict[str, Any]], str]) -> str:
    """A managed namespace without Pod Security's label: the backstop alone guards it."""
    return installed[1]


@pytest.fixture
async def adapter(
    adapter_config: dict[str, Any], backstop: list[dict[str, Any]]
) -> AsyncIterator[KubernetesAdapter]:
    async with KubernetesAdapter(adapter_config) as adapter:
        yield adapter


_pod = probe_pod
_service = probe_service


FORBIDDEN_PODS = {
    "host-network": (_pod("hn", hostNetwork=True), "host's network (hostNetwork)"),
    "host-pid": (_pod("hpid", hostPID=True), "process namespace (hostPID)"),
    "host-ipc": (_pod("hipc", hostIPC=True), "IPC namespace (hostIPC)"),
    "host-port": (
        _pod("hport", container={"ports": [{"containerPort": 80, "hostPort": 8080}]}),
        "host port (hostPort)",
    ),
    "host-path": (
        _pod(
            "hpath",
            container={"volumeMounts": [{"name": "root", "mountPath": "/host"}]},
            volumes=[{"name": "root", "hostPath": {"path": "/"}}],
        ),
        "host path (hostPath)",
    ),
    "privileged": (
        _pod("priv", container={"securityContext": {"privileged": True}}),
        "may not be privileged",
    ),
    "added-capability": (
        _pod("cap", container={"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}),
        "add capabilities beyond the defaults",
    ),
    "privileged-init-container": (
        {
            "metadata": {"name": "init"},
            "spec": {
                "initContainers": [
                    {"name": "i", "image": IMAGE, "securityContext": {"privileged": True}}
                ],
                "containers": [{"name": "c", "image": IMAGE}],
            },
        },
        "may not be privileged",
    ),
}


async def _refused(admin_api: Any, fn: str, *args: Any, **kwargs: Any) -> tuple[int, str]:
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    with pytest.raises(ApiException) as caught:
        await core_call(admin_api, fn, *args, **kwargs)
    return int(caught.value.status), str(caught.value.body)


async def test_the_policies_type_check(admin_api: Any, backstop: list[dict[str, Any]]) -> None:
    from kubernetes import client  # noqa: PLC0415

    admission = client.AdmissionregistrationV1Api(admin_api)
    names = [d["metadata"]["name"] for d in backstop if d["kind"] == "ValidatingAdmissionPolicy"]
    assert names == [
        "pando-runtime-pods",
        "pando-runtime-services",
        "pando-runtime-namespaces",
        "pando-runtime-fence",
        "pando-runtime-fence-namespaces",
    ]
    for name in names:
        policy = admin_api.sanitize_for_serialization(
            await anyio.to_thread.run_sync(
                lambda n=name: admission.read_validating_admission_policy(n)
            )
        )
        warnings = ((policy.get("status") or {}).get("typeChecking") or {}).get(
            "expressionWarnings"
        )
        assert not warnings, f"{name}: {warnings}"


@pytest.mark.parametrize("case", sorted(FORBIDDEN_PODS))
async def test_a_forbidden_pod_is_denied_with_the_policys_message(
    admin_api: Any, probe_namespace: str, case: str
) -> None:
    body, says = FORBIDDEN_PODS[case]
    status, message = await _refused(admin_api, "create_namespaced_pod", probe_namespace, body)
    assert status == 403
    assert "pando:" in message
    assert says in message
    # An ordinary pod in the same namespace is admitted (dry run: nothing is left behind).
    await core_call(admin_api, "create_namespaced_pod", probe_namespace, _pod("ok"), dry_run="All")


async def test_in_an_app_namespace_every_forbidden_object_is_denied(
    adapter: KubernetesAdapter, admin_api: Any
) -> None:
    bundle_id = f"adm-{uuid.uuid4().hex[:8]}"
    ns = namespace_for(bundle_id)
    await adapter.apply(
        BundlePlan(bundle_id=bundle_id, workloads=(WorkloadPlan(name="web", image=IMAGE),))
    )
    try:
        for case, (body, says) in sorted(FORBIDDEN_PODS.items()):
            status, message = await _refused(admin_api, "create_namespaced_pod", ns, body)
            assert status == 403, case
            # Pod Security (baseline, on every app namespace) answers first for pods; the
            # backstop's own message for each is checked where that label is absent.
            assert says in message or "PodSecurity" in message, (case, message)
        for kind, says in (
            ("NodePort", "allowed only in the edge namespace"),
            ("LoadBalancer", "allowed only in the edge namespace"),
            ("ExternalName", "ExternalName Services are not allowed"),
        ):
            status, message = await _refused(
                admin_api, "create_namespaced_service", ns, _service(kind.lower(), kind)
            )
            assert status == 403, kind
            assert "pando:" in message, message
            assert says in message, message
        status, message = await _refused(admin_api, "delete_namespace", ns)
        assert status == 403
        assert "only the pando-runtime adapter may delete a namespace it manages" in message
        for label in ("app.kubernetes.io/managed-by", "pod-security.kubernetes.io/enforce"):
            patch = {"metadata": {"labels": {label: None}}}
            status, message = await _refused(admin_api, "patch_namespace", ns, patch)
            assert status == 403, label
            assert "may change the managed-by or pod-security labels" in message
        # Other labels stay the administrator's to change.
        await core_call(admin_api, "patch_namespace", ns, {"metadata": {"labels": {"team": "a"}}})
    finally:
        await adapter.destroy(BundleRef(bundle_id))
    namespace = await core_call(admin_api, "read_namespace", ns)
    assert namespace.metadata.deletion_timestamp is not None, "the adapter may delete it"


async def test_namespaces_the_adapter_does_not_manage_stay_the_administrators(
    admin_api: Any, backstop: list[dict[str, Any]]
) -> None:
    ns = f"pando-unmanaged-{uuid.uuid4().hex[:6]}"
    await core_call(admin_api, "create_namespace", {"metadata": {"name": ns}})
    await core_call(admin_api, "patch_namespace", ns, {"metadata": {"labels": {"team": "a"}}})
    await core_call(admin_api, "delete_namespace", ns)
    namespace = await core_call(admin_api, "read_namespace", ns)
    assert namespace.metadata.deletion_timestamp is not None


def _tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


async def test_the_adapters_own_objects_are_admitted(
    adapter: KubernetesAdapter, adapter_config: dict[str, Any], admin_api: Any
) -> None:
    """An app (Services, Secrets, files, a volume), its volume helper, a trial, the edge."""
    bundle_id = f"ok-{uuid.uuid4().hex[:8]}"
    plan = BundlePlan(
        bundle_id=bundle_id,
        workloads=(
            WorkloadPlan(
                name="web",
                image=IMAGE,
                env={"A": "1"},
                ports=(Port(8080),),
                files=(CarriedFile("/etc/app.conf", b"x=1\n"),),
                mounts=(Mount("data", "/data"),),
            ),
        ),
        volumes=(VolumePlan(volume_id="data", name="data"),),
    )
    await adapter.apply(plan)
    try:
        observed = await adapter.observe(BundleRef(bundle_id))
        assert observed.exists
        handle = observed.volumes[0].handle
        await adapter.restore_volume(handle, BytesReceiveStream(_tar({"a.txt": b"alpha"})))
        async with adapter.snapshot_volume(handle) as stream:
            assert await read_all(stream)
        result = await adapter.trial(
            TrialRequest(trial_id=f"t-{uuid.uuid4().hex[:8]}", image=IMAGE, timeout_seconds=3)
        )
        assert result.started
        edge = f"e-{uuid.uuid4().hex[:6]}"
        await adapter.apply_edge(
            EdgePlan(name=edge, image=IMAGE, ports=(EdgePort(published=30081, target=80),))
        )
        await adapter.remove_edge(edge)
    finally:
        await adapter.destroy(BundleRef(bundle_id), DestroyOptions(keep_volumes=False))


async def test_the_canary_is_admitted(adapter_config: dict[str, Any], backstop: Any) -> None:
    """On kwok the canary cannot verify enforcement, but its objects are written and removed."""
    config = {**adapter_config, "trust_network_policy": False, "canary_wait": 4.0}
    async with KubernetesAdapter(config) as untrusting:
        with pytest.raises(AdapterUnavailable) as refused:
            await untrusting.health_check()
    assert "canary" in str(refused.value), "refused by its verdict, not by admission"


async def test_the_egress_gateway_is_admitted(
    adapter_config: dict[str, Any], backstop: Any, admin_api: Any
) -> None:
    """An app's gateway (pod, Service, ConfigMap, policies) and a trial's are admitted."""
    config = {
        **adapter_config,
        "trust_egress_policy": True,
        "egress_gateway_image": "registry.example/admission/squid:5",
    }
    rules = EgressPolicy(
        allow=(
            EgressRule(destination="203.0.113.0/24", ports=(443,)),
            EgressRule(destination="api.example.com", ports=(443,)),
        )
    )
    bundle_id = f"gw-{uuid.uuid4().hex[:8]}"
    plan = BundlePlan(
        bundle_id=bundle_id,
        workloads=(WorkloadPlan(name="web", image=IMAGE),),
        network=NetworkPlan(egress=rules),
    )
    async with KubernetesAdapter(config) as adapter:
        await adapter.apply(plan)
        try:
            listed = await core_call(admin_api, "list_namespaced_pod", namespace_for(bundle_id))
            pods = listed.items
            roles = sorted((p.metadata.labels or {}).get("pando.dev/role", "app") for p in pods)
            assert roles == ["app", "egress-gateway"]
            result = await adapter.trial(
                TrialRequest(
                    trial_id=f"t-{uuid.uuid4().hex[:8]}",
                    image=IMAGE,
                    timeout_seconds=3,
                    egress=rules,
                )
            )
            assert result.started
        finally:
            await adapter.destroy(BundleRef(bundle_id))
