"""What the adapter writes on a real API server, and how many calls it costs."""

# ruff: noqa: ASYNC110, S105, S106
from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import anyio.to_thread
import pytest
from _admin_calls import core_call
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import namespace_for

from pando_runtime import (
    AdapterFailed,
    BundlePlan,
    BundleRef,
    CarriedFile,
    HealthCheck,
    Port,
    RegistryAuth,
    Resources,
    WorkloadPlan,
)

pytestmark = [pytest.mark.kube, pytest.mark.anyio]

SECRET_VALUE = "s3cr3t-value-never-in-specs"


@pytest.fixture
async def adapter(adapter_config: dict[str, Any]) -> AsyncIterator[KubernetesAdapter]:
    async with KubernetesAdapter(adapter_config) as adapter:
        yield adapter


def _plan(bundle_id: str, **extra: Any) -> BundlePlan:
    web = WorkloadPlan(
        name="web",
        image="registry.example/app:1",
        env={"TOKEN": SECRET_VALUE},
        ports=(Port(8080),),
        health=HealthCheck(http_path="/health", port=8080),
        resources=Resources(cpu_millis=100, memory_bytes=64 * 1024**2),
        files=(CarriedFile("/etc/app.conf", b"x=1\n"),),
        **extra,
    )
    return BundlePlan(bundle_id=bundle_id, workloads=(web,))


async def _until_running(adapter: KubernetesAdapter, bundle_id: str) -> None:
    with anyio.fail_after(30):
        while not (await adapter.observe(BundleRef(bundle_id))).all_running:
            await anyio.sleep(0.1)


async def test_objects_are_labelled_private_and_carry_no_env(
    adapter: KubernetesAdapter, admin_api: Any
) -> None:
    bundle_id = f"Obj_{id(adapter) % 100000}"
    ns = namespace_for(bundle_id)
    await adapter.apply(_plan(bundle_id))
    try:
        await _until_running(adapter, bundle_id)
        pods = (await core_call(admin_api, "list_namespaced_pod", ns)).items
        assert len(pods) == 1
        pod = admin_api.sanitize_for_serialization(pods[0])
        spec = pod["spec"]
        assert pod["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "pando"
        assert pod["metadata"]["labels"]["pando.dev/bundle"] == bundle_id
        assert pod["metadata"]["labels"]["pando.dev/workload"] == "web"
        assert spec["restartPolicy"] == "Never"
        assert spec["automountServiceAccountToken"] is False
        assert spec["enableServiceLinks"] is False
        assert not spec.get("hostNetwork")
        container = spec["containers"][0]
        assert "livenessProbe" not in container
        assert container["readinessProbe"]["httpGet"]["path"] == "/health"
        assert container["resources"]["requests"] == container["resources"]["limits"]
        assert all("hostPort" not in p for p in container.get("ports", []))
        assert SECRET_VALUE not in json.dumps(pod), "env values never in pod specs/annotations"
        services = (await core_call(admin_api, "list_namespaced_service", ns)).items
        assert [s.spec.type for s in services] == ["ClusterIP"]
        assert services[0].spec.cluster_ip == "None"
        account = await core_call(admin_api, "read_namespaced_service_account", "default", ns)
        assert account.automount_service_account_token is False, "written by the adapter"
        quota = await core_call(admin_api, "read_namespaced_resource_quota", "pando-quota", ns)
        assert quota.spec.hard == {"services.nodeports": "0", "services.loadbalancers": "0"}
        from kubernetes import client  # noqa: PLC0415

        net = client.NetworkingV1Api(admin_api)
        policy = await anyio.to_thread.run_sync(
            lambda: net.read_namespaced_network_policy("pando-default", ns)
        )
        assert policy.spec.policy_types == ["Ingress", "Egress"]
        assert policy.spec.pod_selector.match_labels is None
        # No NodePort or LoadBalancer can be made in an app namespace.
        bad = {"metadata": {"name": "np"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}}
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

        with pytest.raises(ApiException) as refused:
            await core_call(admin_api, "create_namespaced_service", ns, bad)
        assert refused.value.status == 403
    finally:
        await adapter.destroy(BundleRef(bundle_id))


def _refused_writes(caplog: pytest.LogCaptureFixture) -> int:
    """Writes the session retried because RBAC had not yet seen the namespace's RoleBinding."""
    return sum(
        getattr(r, "status", None) == 403 and r.name == "pando_runtime.kubernetes.session"
        for r in caplog.records
    )


def _calls_since(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """Requests made between two counts by kind, less the streams (the cache's watches)."""
    return {
        kind: count - before.get(kind, 0)
        for kind, count in after.items()
        if count != before.get(kind, 0) and not kind.startswith("STREAM ")
    }


async def test_second_apply_writes_only_the_pull_secret(
    adapter: KubernetesAdapter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pando_runtime.kubernetes.session")
    bundle_id = f"calls-{id(adapter) % 100000}"
    auth = RegistryAuth(registry="registry.example", username="u", password="p")
    plan = _plan(bundle_id, pull_auth=auth)
    assert adapter.cache is not None
    assert await adapter.cache.wait_synced(10)
    kinds_before, retries_before = (
        adapter.session.connection.calls_by_kind,
        adapter.session.connection.api_retries,
    )
    await adapter.apply(plan)
    try:
        made = _calls_since(kinds_before, adapter.session.connection.calls_by_kind)
        # A write refused while RBAC catches up with the new RoleBinding is made again, as is
        # one the server throttled; the cache's own watches reconnect on their own clock.
        first_cost = (
            sum(made.values())
            - _refused_writes(caplog)
            - (adapter.session.connection.api_retries - retries_before)
        )
        await _until_running(adapter, bundle_id)
        before = adapter.api_calls
        await adapter.apply(plan)
        assert adapter.api_calls - before == 1, "a satisfied plan writes only the pull secret"
        before = adapter.api_calls
        await adapter.observe(BundleRef(bundle_id))
        assert adapter.api_calls == before, "observe is served by the cache"
        assert first_cost <= 12, made
    finally:
        await adapter.destroy(BundleRef(bundle_id))


async def test_foreign_namespace_is_refused(adapter: KubernetesAdapter, admin_api: Any) -> None:
    bundle_id = f"foreign-{id(adapter) % 100000}"
    ns = namespace_for(bundle_id)
    await core_call(admin_api, "create_namespace", {"metadata": {"name": ns}})
    try:
        with pytest.raises(AdapterFailed):
            await adapter.apply(_plan(bundle_id))
        # And destroy leaves it alone.
        await adapter.destroy(BundleRef(bundle_id))
        assert (await core_call(admin_api, "read_namespace", ns)).status.phase == "Active"
    finally:
        await core_call(admin_api, "delete_namespace", ns)


async def test_the_transport_counts_the_bytes_it_receives(adapter_config: dict[str, Any]) -> None:
    unwatched = KubernetesAdapter(adapter_config)  # no watches: only these calls receive bytes
    api = await unwatched.session.connection.transport()
    before = api.bytes_received
    body = await api.get("/version")
    counted = api.bytes_received - before
    # The body as received: at least its compact JSON, at most a generously indented one.
    assert (
        len(json.dumps(body, separators=(",", ":"))) <= counted <= len(json.dumps(body, indent=4))
    )
    before = api.bytes_received
    await api.get("/version")
    assert api.bytes_received - before == counted, "the same answer counts the same"
    await unwatched.aclose()
