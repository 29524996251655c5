"""Several host replicas on the local control plane: membership on coordination.k8s.io Leases.

The adapters run as the restricted user, bound to exactly the roles of ``deploy/rbac.yaml``
(``pando-runtime-membership`` in the host's namespace, as an installer binds it), so the
RBAC the docs list is what these tests exercise. The conformance kit's membership tests run
on two adapters of the same cluster.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest
from _kube_harness import MEMBERSHIP_SETTINGS, ClusterHooks, ReplicaHarness, until
from localstores import two_clients
from pando_runtime_kubernetes import Cluster, KubernetesAdapter, KubeTransport
from pando_runtime_kubernetes.features._membership import LABEL_GROUP

import pando_runtime as pr
from pando_runtime.testing.conformance import (
    ConformanceHarness,
    LeaseStoreConformance,
    MembershipConformance,
)

pytestmark = [pytest.mark.kube, pytest.mark.anyio]

SETTINGS = MEMBERSHIP_SETTINGS


@pytest.fixture
def harness(kube_cluster: Any, admin_api: Any, adapter_config: dict[str, Any]) -> ReplicaHarness:
    if kube_cluster.logs_file is None:
        pytest.skip("the backend cannot script pods")
    hooks = {None: ClusterHooks(admin_api, kube_cluster.logs_file)}
    return ReplicaHarness(hooks, lambda: KubernetesAdapter(adapter_config))


class TestKubernetesMembershipConformance(MembershipConformance):
    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"  # trio runs them on the fake; here the lease waits dominate

    @pytest.fixture
    async def adapter(self, adapter_config: dict[str, Any]) -> AsyncIterator[KubernetesAdapter]:
        async with KubernetesAdapter(adapter_config) as adapter:
            yield adapter

    @pytest.fixture
    def harness(self, harness: ReplicaHarness) -> ConformanceHarness:
        return harness


class TestKubernetesLeaseStoreRules(LeaseStoreConformance):
    """The Leases loaded by name as a lease store keep the store rules, as the restricted user."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    async def lease_stores(
        self, adapter_config: dict[str, Any]
    ) -> AsyncIterator[tuple[pr.plugin.LeaseStoreClient, pr.plugin.LeaseStoreClient]]:
        async with two_clients("kubernetes", adapter_config) as clients:
            yield clients


def _leases(admin_api: Any) -> dict[str, Any]:
    from kubernetes import client  # noqa: PLC0415

    api = client.CoordinationV1Api(admin_api)
    found = api.list_namespaced_lease("pando", label_selector=LABEL_GROUP)
    return {lease.metadata.name: lease for lease in found.items}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_each_replica_holds_a_lease_kubectl_can_read_and_leaving_deletes_it(
    adapter_config: dict[str, Any], admin_api: Any
) -> None:
    async with (
        KubernetesAdapter(adapter_config) as a,
        a.membership("lease-a", SETTINGS) as membership,
    ):
        leases = _leases(admin_api)
        lease = leases["pando-replica-lease-a"]
        assert lease.spec.holder_identity == "lease-a"
        assert lease.spec.lease_duration_seconds == 3
        assert lease.metadata.labels["app.kubernetes.io/managed-by"] == "pando"
        assert "lease-a" in membership.members()
        async with membership.singleton("lease-job"):
            assert _leases(admin_api)["pando-singleton-lease-job"].spec.holder_identity == "lease-a"
        assert "pando-singleton-lease-job" not in _leases(admin_api)
    assert "pando-replica-lease-a" not in _leases(admin_api)


async def test_a_write_of_a_bundle_the_other_replica_owns_is_refused_naming_it(
    adapter_config: dict[str, Any],
) -> None:
    async with (
        KubernetesAdapter(adapter_config) as a,
        KubernetesAdapter(adapter_config) as b,
        a.membership("calls-a", SETTINGS) as ma,
        b.membership("calls-b", SETTINGS),
        ma.changes() as changes,
    ):
        with anyio.fail_after(30):
            async for change in changes:
                if change.members == {"calls-a", "calls-b"}:
                    break
        bundle_id = next(
            f"calls-{n}"
            for n in range(64)
            if pr.rendezvous_owner(f"calls-{n}", ["calls-a", "calls-b"]) == "calls-b"
        )
        plan = pr.BundlePlan(
            bundle_id=bundle_id,
            workloads=(pr.WorkloadPlan(name="web", image="registry.example/app:1"),),
        )
        with pytest.raises(pr.NotOwner) as caught:
            await a.apply(plan)
        assert caught.value.details["owner"] == "calls-b"
        assert not (await a.observe(pr.BundleRef(bundle_id))).exists, "nothing written"


async def test_a_replica_cut_off_from_the_api_server_stops_writing_and_rejoins(
    adapter_config: dict[str, Any], conformance_config: dict[str, Any], apiserver_proxy: Any
) -> None:
    """b reaches the API server through a proxy: cut, it stops, a takes over; healed, b is back."""
    if apiserver_proxy is None:
        pytest.skip("no Toxiproxy proxy on this backend")
    toxiproxy, name = apiserver_proxy.toxiproxy, apiserver_proxy.proxy.name
    try:
        async with (
            KubernetesAdapter(adapter_config) as a,
            KubernetesAdapter(conformance_config) as b,
            a.membership("cut-a", SETTINGS) as ma,
            b.membership("cut-b", SETTINGS) as mb,
            mb.changes() as b_changes,
        ):
            members = {"cut-a", "cut-b"}
            ids = [f"cut-{n}" for n in range(64)]
            await until(lambda: mb.members() == members and any(mb.owns(i) for i in ids))
            bs = [i for i in ids if mb.owns(i)]
            await anyio.to_thread.run_sync(lambda: toxiproxy.set_enabled(name, False))
            with anyio.fail_after(30):
                async for change in b_changes:
                    if not change.members:  # not renewed for the renew deadline: it writes nothing
                        break
            assert not any(mb.owns(i) for i in bs)
            with pytest.raises(pr.NotOwner):
                await b.apply(
                    pr.BundlePlan(
                        bundle_id=bs[0],
                        workloads=(pr.WorkloadPlan(name="web", image="registry.example/app:1"),),
                    )
                )
            await until(lambda: all(ma.owns(i) for i in bs))
            assert ma.members() == {"cut-a"}
            await anyio.to_thread.run_sync(lambda: toxiproxy.set_enabled(name, True))
            await until(lambda: mb.members() == members and all(mb.owns(i) for i in bs))
            assert not any(ma.owns(i) for i in bs), "never two owners"
    finally:
        toxiproxy.reset()


def _lease_names(admin_api: Any, namespace: str) -> list[str]:
    from kubernetes import client  # noqa: PLC0415

    found = client.CoordinationV1Api(admin_api).list_namespaced_lease(namespace)
    return [lease.metadata.name for lease in found.items]


@pytest.fixture
def host_namespace(admin_api: Any) -> Iterator[str]:
    """A fresh host namespace holding the service account ``robot``, which has no rights."""
    from kubernetes import client  # noqa: PLC0415

    core = client.CoreV1Api(admin_api)
    ns = f"pando-host-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_service_account(ns, {"metadata": {"name": "robot"}})
    try:
        yield ns
    finally:
        core.delete_namespace(ns)


async def test_a_missing_server_namespace_is_named_with_its_setting_and_nothing_is_written(
    kube_cluster: Any, admin_api: Any
) -> None:
    """As a newcomer meets it: the admin identity, a ``server_namespace`` nobody created."""
    from kubernetes import client  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    absent = f"pando-absent-{uuid.uuid4().hex[:8]}"
    config = {
        "kubeconfig": str(kube_cluster.kubeconfig),
        "context": kube_cluster.context,
        "server_namespace": absent,
    }
    async with KubernetesAdapter(config) as adapter:
        with pytest.raises(pr.AdapterUnavailable) as caught:
            async with adapter.membership("ra", SETTINGS):
                pass
    error = caught.value
    assert error.message.startswith("replica 'ra' could not write its lease: ")
    assert f"namespace {absent!r} does not exist (the 'server_namespace' setting names it)" in (
        error.message
    )
    assert f"kubectl create namespace {absent}" in error.remedy
    assert "set 'server_namespace'" in error.remedy
    assert error.details["namespace"] == absent
    assert error.details["setting"] == "server_namespace"
    assert error.details["status"] == 404
    assert error.details["replica"] == "ra"
    with pytest.raises(ApiException) as missing:  # nothing written: not even the namespace
        client.CoreV1Api(admin_api).read_namespace(absent)
    assert missing.value.status == 404


# The verbs granted on Leases -> the call refused, as the join reports it (a refused
# conditional write is AdapterUnavailable, as every failed one: see SessionWriter.write_if).
NO_LEASE_RIGHTS = {
    "none": ((), "list", pr.AdapterUnavailable, "could not read the members' leases"),
    "read-only": (
        ("get", "list", "watch"),
        "create",
        pr.AdapterUnavailable,
        "could not write its lease",
    ),
}


@pytest.mark.parametrize("rights", NO_LEASE_RIGHTS)
async def test_an_identity_without_lease_rights_is_told_the_verb_and_the_role_it_needs(
    kube_cluster: Any, admin_api: Any, host_namespace: str, rights: str
) -> None:
    """A service account with no Lease rights (or only reading ones) in the host's namespace."""
    from kubernetes import client  # noqa: PLC0415

    granted, refused, error_class, doing = NO_LEASE_RIGHTS[rights]
    ns = host_namespace
    if granted:
        rbac = client.RbacAuthorizationV1Api(admin_api)
        rule = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": granted}
        rbac.create_namespaced_role(ns, {"metadata": {"name": "read-leases"}, "rules": [rule]})
        rbac.create_namespaced_role_binding(
            ns,
            {
                "metadata": {"name": "read-leases"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "read-leases",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": ns}],
            },
        )
    admin = Cluster.load(kube_cluster.kubeconfig, kube_cluster.context)
    robot = await admin.run_as(ns, "robot")
    identity = f"system:serviceaccount:{ns}:robot"
    config = {"server_namespace": ns}

    async def join() -> None:
        transport = KubeTransport.for_cluster(robot)
        async with (
            KubernetesAdapter(config, transport=transport) as adapter,
            adapter.membership("ra", SETTINGS),
        ):
            pass

    caught = None
    # A Role just bound may take a moment to reach the API server's authorizer: until then
    # even the reads it grants are refused. Wait for the refusal this case is about.
    with anyio.fail_after(30):
        while caught is None or f"may not {refused} " not in caught.message:
            with pytest.raises(error_class) as raised:
                await join()
            caught = raised.value
            await anyio.sleep(0.2)
    what = "list the members leases" if refused == "list" else "write the lease of 'ra'"
    assert caught.message == (
        f"replica 'ra' {doing}: cannot {what}: the API server refused it (403 Forbidden): "
        f"{identity!r} may not {refused} leases.coordination.k8s.io in namespace {ns!r}"
    )
    assert "ClusterRole pando-runtime-membership" in caught.remedy
    assert f"resources: [leases], verbs: [{refused}]" in caught.remedy
    assert caught.details["identity"] == identity
    assert caught.details["verb"] == refused
    assert caught.details["status"] == 403
    assert _lease_names(admin_api, ns) == [], "nothing written"
