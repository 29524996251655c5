"""Tokens and run-as on the local control plane: TokenRequest, TokenReview, RBAC.

The admin identity (a client certificate) requests tokens for a service account of a
fresh namespace; the API server's TokenReview says whom a token proves and for which
audience, and RBAC decides what the account acting through ``run_as`` may do.
"""

# ruff: noqa: ASYNC110
from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import anyio.to_thread
import pytest
from localcluster.backends import KubeCluster
from pando_runtime_kubernetes import ApiError, Cluster, KubernetesAdapter, KubeTransport
from pando_runtime_kubernetes.api._tokens import REFRESH_AT, RequestedToken, acting_as

from pando_runtime import (
    AdapterFailed,
    BundlePlan,
    BundleRef,
    InvalidInput,
    NotFound,
    Resources,
    WorkloadPlan,
)

pytestmark = [pytest.mark.kube, pytest.mark.anyio, pytest.mark.every_minor]

ACCOUNT = "robot"
AUDIENCE = "pando-tests.example"


@pytest.fixture
def admin(kube_cluster: KubeCluster) -> Cluster:
    return Cluster.load(kube_cluster.kubeconfig, kube_cluster.context)


def _rbac(admin_api: Any) -> Any:
    from kubernetes import client  # noqa: PLC0415

    return client.RbacAuthorizationV1Api(admin_api)


@pytest.fixture
def namespace(admin_api: Any) -> Iterator[str]:
    """A fresh namespace holding the service account ``robot``, which has no rights."""
    from kubernetes import client  # noqa: PLC0415

    core = client.CoreV1Api(admin_api)
    ns = f"pando-id-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_service_account(ns, {"metadata": {"name": ACCOUNT}})
    try:
        yield ns
    finally:
        core.delete_namespace(ns)


def _review(admin_api: Any, token: str, audience: str) -> Any:
    from kubernetes import client  # noqa: PLC0415

    api = client.AuthenticationV1Api(admin_api)
    body = {"spec": {"token": token, "audiences": [audience]}}
    return api.create_token_review(body).status


async def test_token_passes_review_for_its_audience_only(
    admin: Cluster, namespace: str, admin_api: Any
) -> None:
    before = dt.datetime.now(dt.UTC)
    token = await admin.token(AUDIENCE, namespace=namespace, service_account=ACCOUNT, ttl=900)
    assert token.audiences == (AUDIENCE,)
    assert (token.namespace, token.service_account) == (namespace, ACCOUNT)
    assert before + dt.timedelta(seconds=800) < token.expires_at
    assert token.expires_at <= before + dt.timedelta(seconds=1000)
    assert token.token not in repr(token)
    assert token.token not in str(token)

    ours = await anyio.to_thread.run_sync(_review, admin_api, token.token, AUDIENCE)
    assert ours.authenticated is True
    assert ours.user.username == f"system:serviceaccount:{namespace}:{ACCOUNT}"
    assert ours.audiences == [AUDIENCE]
    other = await anyio.to_thread.run_sync(_review, admin_api, token.token, "someone-else")
    assert not other.authenticated
    assert other.error


async def test_token_errors_are_coded_and_hold_no_token(
    admin: Cluster, namespace: str, kube_cluster: KubeCluster
) -> None:
    with pytest.raises(NotFound, match="nobody"):
        await admin.token(AUDIENCE, namespace=namespace, service_account="nobody")
    with pytest.raises(InvalidInput, match="ttl"):
        await admin.token(AUDIENCE, namespace=namespace, service_account=ACCOUNT, ttl=60)
    if kube_cluster.restricted_kubeconfig is None:
        return
    # The restricted user holds no right on service-account tokens in this namespace.
    restricted = Cluster.load(kube_cluster.restricted_kubeconfig)
    with pytest.raises(AdapterFailed) as refused:
        await restricted.token(AUDIENCE, namespace=namespace, service_account=ACCOUNT)
    assert refused.value.details["status"] == 403


async def _who(transport: KubeTransport) -> str:
    review = await transport.request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    return str(review["status"]["userInfo"]["username"])


@pytest.fixture
async def robot_transport(admin: Cluster, namespace: str) -> AsyncIterator[KubeTransport]:
    robot = await admin.run_as(namespace, ACCOUNT)
    assert robot.identity == f"system:serviceaccount:{namespace}:{ACCOUNT}"
    assert robot.name == admin.name
    transport = KubeTransport.for_cluster(robot)
    try:
        yield transport
    finally:
        transport.close()


async def test_run_as_is_refused_without_rights_and_allowed_once_granted(
    robot_transport: KubeTransport, namespace: str, admin_api: Any
) -> None:
    transport = robot_transport
    configmaps = f"/api/v1/namespaces/{namespace}/configmaps"
    assert await _who(transport) == f"system:serviceaccount:{namespace}:{ACCOUNT}"
    with pytest.raises(ApiError) as refused:
        await transport.get(configmaps)
    assert refused.value.status == 403
    assert f"system:serviceaccount:{namespace}:{ACCOUNT}" in refused.value.message

    rbac = _rbac(admin_api)
    rules = [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "verbs": ["get", "list", "watch", "create"],
        }
    ]
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "cm"}, "rules": rules})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "cm"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm"},
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}],
        },
    )
    with anyio.fail_after(20):  # the API server's RBAC cache takes the binding in shortly
        while True:
            try:
                listed = await transport.get(configmaps)
                break
            except ApiError as error:
                if error.status != 403:
                    raise
                await anyio.sleep(0.2)
    # A watch (a stream) carries the same identity.
    query = {"watch": "true", "resourceVersion": listed["metadata"]["resourceVersion"]}
    async with transport.stream(configmaps, query=query, read_timeout=20) as stream:
        await transport.request(
            "POST", configmaps, body={"metadata": {"name": "made-by-robot"}, "data": {"a": "1"}}
        )
        with anyio.fail_after(20):
            seen = b""
            while b"made-by-robot" not in seen:
                chunk = await stream.receive()
                assert chunk, "the watch ended before the event"
                seen += chunk
    made = await transport.get(f"{configmaps}/made-by-robot")
    assert made["data"] == {"a": "1"}
    # Still refused outside what the Role grants.
    with pytest.raises(ApiError) as outside:
        await transport.get(f"/api/v1/namespaces/{namespace}/secrets")
    assert outside.value.status == 403


async def test_run_as_token_is_requested_again_before_it_expires(
    admin: Cluster, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    from kubernetes.client import Configuration  # noqa: PLC0415

    now = [0.0]
    source = RequestedToken(admin.configuration, namespace, ACCOUNT, ttl=600, clock=lambda: now[0])
    configuration = await anyio.to_thread.run_sync(acting_as, admin.configuration, source)
    transport = KubeTransport(configuration)
    try:
        who = f"system:serviceaccount:{namespace}:{ACCOUNT}"
        assert await _who(transport) == who
        first = source.current()
        assert source.requests == 1
        now[0] = REFRESH_AT * 600 - 30  # not yet due
        assert await _who(transport) == who
        assert source.requests == 1
        now[0] = REFRESH_AT * 600 + 1  # due: a new token, before the old one expires
        assert await _who(transport) == who
        assert source.requests == 2
        second = source.current()
        assert second.token != first.token
        # A refresh that fails while the token is valid keeps it and retries later.
        source._base = Configuration(host="https://127.0.0.1:9")  # a dead server
        now[0] += REFRESH_AT * 600 + 1
        with caplog.at_level(logging.WARNING, logger="pando_runtime_kubernetes.api._tokens"):
            assert await _who(transport) == who
        assert "cannot renew the token" in caplog.text
        assert second.token not in caplog.text
        assert source.current() is second
        # Past its expiry, the failure is the call's.
        now[0] += 600
        with pytest.raises(ApiError) as failed:
            await _who(transport)
        assert failed.value.status == 0
        assert "token request" in failed.value.reason
        assert second.token not in str(failed.value)
    finally:
        transport.close()


async def test_adapter_acts_as_the_account_for_every_call(
    admin: Cluster, namespace: str, admin_api: Any, adapter_config: dict[str, Any]
) -> None:
    """The adapter over a run-as cluster: refused without the adapter's role, working with it."""
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    robot = await admin.run_as(namespace, ACCOUNT)
    subject = {"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}
    config = {**adapter_config, "app_subject": f"ServiceAccount:{namespace}:{ACCOUNT}"}
    binding_name = f"pando-runtime-{namespace}"
    rbac = _rbac(admin_api)
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": binding_name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "pando-runtime",
            },
            "subjects": [subject],
        }
    )
    bundle_id = f"robot-{namespace[-8:]}"
    plan = BundlePlan(
        bundle_id=bundle_id,
        workloads=(
            WorkloadPlan(
                name="web",
                image="registry.example/robot:1",
                resources=Resources(cpu_millis=50, memory_bytes=32 * 1024**2),
            ),
        ),
    )
    try:
        async with KubernetesAdapter(config, transport=KubeTransport.for_cluster(robot)) as adapter:
            await adapter.apply(plan)
            with anyio.fail_after(30):
                while not (await adapter.observe(BundleRef(bundle_id))).all_running:
                    await anyio.sleep(0.2)
            await adapter.destroy(BundleRef(bundle_id))
    finally:
        try:
            rbac.delete_cluster_role_binding(binding_name)
        except ApiException as error:
            if error.status != 404:
                raise
