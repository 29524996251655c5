"""What an instrumented adapter reports on the local control plane: metrics, logs, no secret.

The metrics are read back with the OpenTelemetry SDK's in-memory reader; the logs with a handler
on ``pando_runtime`` at DEBUG, which every logger of the core and of the adapter reaches.
"""

# ruff: noqa: ASYNC110
from __future__ import annotations

import logging
import socket
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest
from kubernetes.client import Configuration
from observing import Otel, assert_no_secret, capturing, otel_sdk
from pando_runtime_kubernetes import Cluster, KubernetesAdapter, KubeTransport
from pando_runtime_kubernetes.api._errors import ApiError

import pando_runtime as pr

pytestmark = [pytest.mark.kube, pytest.mark.anyio]

ACCOUNT = "robot"


def _calls(otel: Otel) -> Counter[tuple[str, str, int]]:
    """API calls so far by verb, resource and status."""
    counts: Counter[tuple[str, str, int]] = Counter()
    for p in otel.points("pando_runtime.api.calls"):
        a = p.attributes
        counts[a["pando.api.verb"], a["pando.api.resource"], a["http.response.status_code"]] += (
            p.value
        )
    return counts


@pytest.fixture
def otel() -> Iterator[Otel]:
    with otel_sdk() as sdk:
        yield sdk


@pytest.fixture
def captured() -> Iterator[list[logging.LogRecord]]:
    with capturing() as records:
        yield records


def _plan(bundle_id: str, **extra: Any) -> pr.BundlePlan:
    return pr.BundlePlan(
        bundle_id=bundle_id,
        workloads=(
            pr.WorkloadPlan(
                name="web",
                image="registry.example/observed:1",
                ports=(pr.Port(8080),),
                resources=pr.Resources(cpu_millis=50, memory_bytes=32 * 1024**2),
                **extra,
            ),
        ),
    )


async def _until_running(runtime: pr.RuntimeAdapter, bundle_id: str) -> None:
    with anyio.fail_after(30):
        while not (await runtime.observe(pr.BundleRef(bundle_id))).all_running:
            await anyio.sleep(0.1)


async def test_an_apply_then_observe_shows_the_calls_by_verb_and_status(
    otel: Otel, adapter_config: dict[str, Any]
) -> None:
    bundle_id = f"metrics-{uuid.uuid4().hex[:6]}"
    async with otel.instrument(KubernetesAdapter(adapter_config)) as runtime:
        adapter = runtime.adapter
        assert isinstance(adapter, KubernetesAdapter)
        assert adapter.cache is not None, "the wrapper's block runs the adapter's watches"
        assert await adapter.cache.wait_synced(10)
        with anyio.fail_after(10):  # a watch opens just after its list
            while sum(adapter.session.api_state().open_watches.values()) < 4:
                await anyio.sleep(0.05)
        assert otel.by_resource("pando_runtime.api.watches") == {
            "pods": 1,
            "services": 1,
            "namespaces": 1,
            "persistentvolumeclaims": 1,
        }
        before, counted = _calls(otel), adapter.api_calls
        assert sum(before.values()) == counted, "every call the transport made is measured"
        await runtime.apply(_plan(bundle_id))
        try:
            applied = _calls(otel) - before
            assert sum(applied.values()) == adapter.api_calls - counted
            assert applied[("create", "pods", 201)] == 1
            assert applied[("patch", "namespaces", 200)] >= 1, "the namespace, applied"
            # A write just after the namespace's RoleBinding may be refused while RBAC
            # catches up; the session retries it. Nothing else is refused.
            refused = {k: n for k, n in applied.items() if k[2] >= 400}
            assert {status for _, _, status in refused} <= {403}, refused
            await _until_running(runtime, bundle_id)
            settled, counted = _calls(otel), adapter.api_calls
            await runtime.apply(_plan(bundle_id))
            await runtime.observe(pr.BundleRef(bundle_id))
            assert _calls(otel) == settled, "a re-apply and an observe make no call"
            assert adapter.api_calls == counted
            cached = otel.by_resource("pando_runtime.cache.objects")
            assert cached["pods"] >= 1
            assert cached["namespaces"] >= 1
            assert cached["services"] >= 1
            loop = adapter.cache.loops["pods"]
            lists = loop.lists
            adapter.session.cache.force_relist()  # as after a gap in the pod watch
            with anyio.fail_after(10):
                while loop.lists == lists:
                    await anyio.sleep(0.05)
            restarts = {
                (p.attributes["pando.api.resource"], p.attributes["pando.reason"]): p.value
                for p in otel.points("pando_runtime.api.watch_restarts")
            }
            assert restarts == {("pods", "requested"): 1}
            durations = otel.points("pando_runtime.api.duration")
            assert sum(p.count for p in durations) == sum(_calls(otel).values())
            assert all(p.sum > 0 for p in durations)
        finally:
            await runtime.destroy(pr.BundleRef(bundle_id))
    assert adapter.cache is None, "and closes them"
    assert otel.by_resource("pando_runtime.api.watches") == {
        "pods": 0,
        "services": 0,
        "namespaces": 0,
        "persistentvolumeclaims": 0,
    }
    spans = {s.name for s in otel.spans.get_finished_spans()}
    assert {"pando_runtime open", "pando_runtime apply", "pando_runtime aclose"} <= spans


@pytest.fixture
async def robot(admin_api: Any, kube_cluster: Any) -> AsyncIterator[tuple[str, Cluster]]:
    """A namespace with the service account ``robot``, bound to the adapter's role.

    Yields the namespace and the cluster acting as the account, by a requested token.
    """
    from kubernetes import client  # noqa: PLC0415

    core = client.CoreV1Api(admin_api)
    rbac = client.RbacAuthorizationV1Api(admin_api)
    ns = f"pando-obs-{uuid.uuid4().hex[:8]}"
    binding = f"pando-runtime-{ns}"
    core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_service_account(ns, {"metadata": {"name": ACCOUNT}})
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": binding},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "pando-runtime",
            },
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": ns}],
        }
    )
    try:
        admin = Cluster.load(kube_cluster.kubeconfig, kube_cluster.context)
        yield ns, await admin.run_as(ns, ACCOUNT)
    finally:
        rbac.delete_cluster_role_binding(binding)
        core.delete_namespace(ns)


async def test_debug_logs_and_spans_of_a_plan_with_secrets_hold_none_of_them(
    otel: Otel,
    captured: list[logging.LogRecord],
    adapter_config: dict[str, Any],
    robot: tuple[str, Cluster],
) -> None:
    ns, cluster = robot
    token = cluster.configuration.api_key["BearerToken"].removeprefix("Bearer ")
    secrets = {
        "env": f"env-{uuid.uuid4().hex}",
        "pull password": f"pull-{uuid.uuid4().hex}",
        "file": f"file-{uuid.uuid4().hex}",
        "token": token,
    }
    assert len(token) > 20, "a real bearer token"
    bundle_id = f"secrets-{ns[-8:]}"
    plan = _plan(
        bundle_id,
        env={"API_KEY": secrets["env"]},
        pull_auth=pr.RegistryAuth(
            registry="registry.example", username="robot", password=secrets["pull password"]
        ),
        files=(pr.CarriedFile("/etc/app.conf", f"key = {secrets['file']}\n".encode()),),
    )
    config = {**adapter_config, "app_subject": f"ServiceAccount:{ns}:{ACCOUNT}"}
    adapter = KubernetesAdapter(config, transport=KubeTransport.for_cluster(cluster))
    async with otel.instrument(adapter) as runtime:
        await runtime.apply(plan)
        try:
            await _until_running(runtime, bundle_id)
            await runtime.apply(plan)  # rewrites the pull secret
            await runtime.stop(pr.BundleRef(bundle_id))
        finally:
            await runtime.destroy(pr.BundleRef(bundle_id))
    names = {r.name for r in captured}
    assert {
        "pando_runtime.operations",
        "pando_runtime.kubernetes.transport",
        "pando_runtime.kubernetes.watch",
        "pando_runtime.kubernetes.bundles",
    } <= names, names
    calls = [r for r in captured if r.name == "pando_runtime.kubernetes.transport"]
    assert any(r.verb == "patch" and r.resource == "secrets" for r in calls)  # type: ignore[attr-defined]
    applied = next(r for r in captured if r.getMessage().startswith(f"applied {bundle_id}"))
    assert applied.levelno == logging.INFO
    assert applied.writes > 0  # type: ignore[attr-defined]
    assert_no_secret(captured, secrets, otel.spans.get_finished_spans())


async def test_the_transport_counts_the_calls_the_api_server_answered(kube_cluster: Any) -> None:
    # Whether the server is there is learned from every call (the cache's probe is only one).
    transport = KubeTransport.for_cluster(
        Cluster.load(kube_cluster.kubeconfig, kube_cluster.context)
    )
    try:
        await transport.get("/version")
        with pytest.raises(ApiError) as missing:
            await transport.get(f"/api/v1/namespaces/absent-{uuid.uuid4().hex[:8]}")
        assert missing.value.status == 404  # an answer too
        await transport.probe(10)
        assert transport.answers == 3
    finally:
        transport.close()
    with socket.socket() as closed:  # a loopback port nothing listens on: refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    nobody = KubeTransport(Configuration(host=f"https://127.0.0.1:{port}"), connect_timeout=2)
    try:
        with pytest.raises(ApiError) as refused:
            await nobody.probe(2)
        assert refused.value.status == 0
        assert nobody.answers == 0
    finally:
        nobody.close()
