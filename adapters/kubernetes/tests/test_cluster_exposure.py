"""Exposure on a real API server: the policies written for exposed workloads, and what they cost.

kwok runs no network plugin, so nothing here sends a packet: NetworkPolicies are API objects,
and the test reads what the adapter wrote. The namespace's own policy admits only the app's
pods; an exposed workload has a policy of its own admitting the host's server pods and the
edge's pods on its ports. Flipping ``exposed`` writes that policy (or deletes it) and the
namespace, replaces no pod, and an unchanged plan writes nothing.
"""

# ruff: noqa: ASYNC110
from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread
import attrs
import pytest
from _admin_calls import core_call
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import namespace_for

from pando_runtime import BundlePlan, BundleRef, Port, PortProtocol, WorkloadPlan

pytestmark = [pytest.mark.kube, pytest.mark.anyio]

IMAGE = "registry.example/exposure/app:1"
SERVER_NAMESPACE = "pando-host"
SERVER_LABELS = {"app.kubernetes.io/name": "pando-server"}
OWN_PODS = [{"from": [{"podSelector": {}}]}]


@pytest.fixture
async def adapter(adapter_config: dict[str, Any]) -> AsyncIterator[KubernetesAdapter]:
    settings = {
        **adapter_config,
        "server_namespace": SERVER_NAMESPACE,
        "server_labels": SERVER_LABELS,
    }
    async with KubernetesAdapter(settings) as adapter:
        assert adapter.cache is not None
        assert await adapter.cache.wait_synced(10)
        yield adapter


def _plan(bundle_id: str, *, web: bool, db: bool) -> BundlePlan:
    return BundlePlan(
        bundle_id=bundle_id,
        workloads=(
            WorkloadPlan(
                name="web",
                image=IMAGE,
                ports=(Port(8080), Port(8443), Port(5353, PortProtocol.UDP)),
                exposed=web,
            ),
            WorkloadPlan(name="db", image=IMAGE, ports=(Port(5432),), exposed=db),
        ),
    )


async def _policies(admin_api: Any, ns: str) -> dict[str, dict[str, Any]]:
    """The namespace's NetworkPolicies by name, as plain dicts (read as the administrator)."""
    from kubernetes import client  # noqa: PLC0415

    net = client.NetworkingV1Api(admin_api)
    found = await anyio.to_thread.run_sync(lambda: net.list_namespaced_network_policy(ns))
    return {
        p["metadata"]["name"]: p
        for p in map(admin_api.sanitize_for_serialization, found.items)
        if not p["metadata"].get("deletionTimestamp")
    }


async def _cost(
    adapter: KubernetesAdapter, caplog: pytest.LogCaptureFixture, act: Callable[[], Awaitable[Any]]
) -> tuple[int, dict[str, int]]:
    """The requests ``act`` made, by kind, less those made again.

    Not counted: the cache's watches (streams), a write retried while RBAC catches up with
    a new RoleBinding (403), and one the server throttled.
    """
    caplog.clear()
    before, retries = (
        dict(adapter.session.connection.calls_by_kind),
        adapter.session.connection.api_retries,
    )
    await act()
    made = {
        kind: count - before.get(kind, 0)
        for kind, count in adapter.session.connection.calls_by_kind.items()
        if count != before.get(kind, 0) and not kind.startswith("STREAM ")
    }
    refused = sum(
        getattr(r, "status", None) == 403 and r.name == "pando_runtime.kubernetes.session"
        for r in caplog.records
    )
    return sum(made.values()) - refused - (adapter.session.connection.api_retries - retries), made


async def _until_running(adapter: KubernetesAdapter, bundle_id: str) -> dict[str, str | None]:
    """Wait until every workload runs; their instance ids by name."""
    with anyio.fail_after(30):
        while not (observed := await adapter.observe(BundleRef(bundle_id))).all_running:
            await anyio.sleep(0.1)
    return {w.name: w.instance_id for w in observed.workloads}


async def test_exposed_workloads_get_a_policy_of_their_own_that_follows_the_plan(
    adapter: KubernetesAdapter, admin_api: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pando_runtime.kubernetes.session")
    suffix = uuid.uuid4().hex[:8]
    hidden, shown = f"hidden-{suffix}", f"shown-{suffix}"
    hidden_ns, shown_ns = namespace_for(hidden), namespace_for(shown)
    try:
        # First applies: nothing exposed, then the same app with web exposed.
        plain, plain_made = await _cost(
            adapter, caplog, lambda: adapter.apply(_plan(hidden, web=False, db=False))
        )
        exposed, exposed_made = await _cost(
            adapter, caplog, lambda: adapter.apply(_plan(shown, web=True, db=False))
        )
        # What a first apply cost before exposure existed: the namespace made and annotated,
        # its RoleBinding, ServiceAccount, policy and quota, the plan key, then a Service, a
        # Secret and a pod for each workload. Exposing one workload adds its policy alone.
        assert plain == 13, plain_made
        assert exposed == plain + 1, exposed_made
        assert exposed_made.get("PATCH networkpolicies") == 2, "pando-default and web's"
        instances = await _until_running(adapter, shown)
        await _until_running(adapter, hidden)

        # The namespace's own policy: the app's pods alone, in both apps.
        for ns in (hidden_ns, shown_ns):
            default = (await _policies(admin_api, ns))["pando-default"]
            assert default["spec"]["ingress"] == OWN_PODS, "no server pod, no edge pod"
        assert set(await _policies(admin_api, hidden_ns)) == {"pando-default"}
        found = await _policies(admin_api, shown_ns)
        assert set(found) == {"pando-default", "pando-expose-web"}
        spec = found["pando-expose-web"]["spec"]
        assert spec["podSelector"] == {
            "matchLabels": {"pando.dev/bundle": shown, "pando.dev/workload": "web"}
        }
        assert spec["policyTypes"] == ["Ingress"]
        (rule,) = spec["ingress"]
        assert rule["ports"] == [
            {"protocol": "TCP", "port": 8080},
            {"protocol": "TCP", "port": 8443},
            {"protocol": "UDP", "port": 5353},
        ]
        assert rule["from"] == [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": SERVER_NAMESPACE}
                },
                "podSelector": {"matchLabels": SERVER_LABELS},
            },
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": adapter.config.edge_namespace}
                },
                "podSelector": {
                    "matchLabels": {
                        "app.kubernetes.io/managed-by": "pando",
                        "pando.dev/role": "edge",
                    }
                },
            },
        ]
        (web_pod,) = [
            p
            for p in (await core_call(admin_api, "list_namespaced_pod", shown_ns)).items
            if p.metadata.labels.get("pando.dev/workload") == "web"
        ]
        assert spec["podSelector"]["matchLabels"].items() <= web_pod.metadata.labels.items()

        # Unchanged plans: nothing at all.
        for plan in (_plan(hidden, web=False, db=False), _plan(shown, web=True, db=False)):
            again, made = await _cost(adapter, caplog, lambda p=plan: adapter.apply(p))
            assert again == 0, made

        # Flips: only the policies that changed written or deleted, and the namespace; no pod
        # replaced.
        flips = [
            (False, False, {"DELETE networkpolicies": 1, "PATCH namespaces": 1}),
            (True, True, {"PATCH networkpolicies": 2, "PATCH namespaces": 1}),
            (False, True, {"DELETE networkpolicies": 1, "PATCH namespaces": 1}),
            (True, True, {"PATCH networkpolicies": 1, "PATCH namespaces": 1}),
        ]
        for web, db, expected in flips:
            plan = _plan(shown, web=web, db=db)
            cost, made = await _cost(adapter, caplog, lambda p=plan: adapter.apply(p))
            assert made == expected, (web, db)
            assert cost == sum(expected.values())
            wanted = {f"pando-expose-{w.name}" for w in plan.workloads if w.exposed}
            assert set(await _policies(admin_api, shown_ns)) == {"pando-default", *wanted}
            again, made = await _cost(adapter, caplog, lambda p=plan: adapter.apply(p))
            assert again == 0, made
        assert await _until_running(adapter, shown) == instances, "exposure replaces no pod"

        # A workload removed takes its policy with it.
        web_only = _plan(shown, web=True, db=True)
        await adapter.apply(attrs.evolve(web_only, workloads=web_only.workloads[:1]))
        assert set(await _policies(admin_api, shown_ns)) == {"pando-default", "pando-expose-web"}
        namespace = await core_call(admin_api, "read_namespace", shown_ns)
        mark = namespace.metadata.annotations["pando.dev/exposed"]  # <workload>=<digest> each
        assert mark.startswith("web=")
        assert "," not in mark
    finally:
        await adapter.destroy(BundleRef(hidden))
        await adapter.destroy(BundleRef(shown))
