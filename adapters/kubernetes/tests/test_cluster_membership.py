"""Several host replicas on the local control plane: membership on coordination.k8s.io Leases.

The adapters run as the restricted user, bound to exactly the roles of ``deploy/rbac.yaml``
(``pando-runtime-membership`` in the host's namespace, as an installer binds it), so the
RBAC the docs list is what these tests exercise. The conformance kit's membership tests run
on two adapters of the same cluster.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from _kube_harness import MEMBERSHIP_SETTINGS, ClusterHooks, ReplicaHarness, until
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes.features._membership import LABEL_GROUP

import pando_runtime as pr
from pando_runtime.testing.conformance import ConformanceHarness, MembershipConformance

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
