"""Egress on a real API server: every object written for each kind of rule, and what it costs.

kwok runs no network plugin, so nothing here sends a packet: the tests check what the adapter
writes (the namespace's policy, the gateway's pod, Service, ConfigMap and policy, the app pods'
proxy variables), that a changed plan changes exactly that, that an unchanged one writes
nothing, and that the capabilities say what is enforced. The generated Squid configuration
is run for real in ``test_gateway_proxy.py``.
"""

# ruff: noqa: ASYNC110
from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.to_thread
import pytest
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import namespace_for, trial_namespace
from pando_runtime_kubernetes.manifests._egress import (
    GATEWAY_POLICY,
    METADATA_ADDRESSES,
    PRIVATE_RANGES,
    ClusterRanges,
)
from pando_runtime_kubernetes.manifests._gateway import (
    CONFIG_KEY,
    GATEWAY,
    GATEWAY_PORT,
    squid_config,
)

from pando_runtime import (
    BundlePlan,
    BundleRef,
    CapabilityUnsupported,
    EgressPolicy,
    EgressRule,
    InvalidPlan,
    NetworkPlan,
    Port,
    TrialRequest,
    WorkloadPlan,
)

pytestmark = [pytest.mark.kube, pytest.mark.anyio, pytest.mark.every_minor]

IMAGE = "registry.example/egress/app:1"
GATEWAY_IMAGE = "registry.example/egress/squid:5"
CIDR = EgressRule(destination="203.0.113.0/24", ports=(5432,))
HOST = EgressRule(destination="api.example.com", ports=(443,))


@pytest.fixture
def enforcing(adapter_config: dict[str, Any]) -> dict[str, Any]:
    """Settings of a cluster whose egress enforcement the operator vouches for."""
    return {
        **adapter_config,
        "trust_egress_policy": True,
        "egress_gateway_image": GATEWAY_IMAGE,
    }


@pytest.fixture
async def adapter(enforcing: dict[str, Any]) -> AsyncIterator[KubernetesAdapter]:
    async with KubernetesAdapter(enforcing) as adapter:
        assert adapter.cache is not None
        assert await adapter.cache.wait_synced(10)
        yield adapter


def _plan(bundle_id: str, *rules: EgressRule, restricted: bool = True) -> BundlePlan:
    web = WorkloadPlan(name="web", image=IMAGE, ports=(Port(8080),))
    db = WorkloadPlan(name="db", image=IMAGE)
    network = NetworkPlan(egress=EgressPolicy(allow=rules)) if restricted else NetworkPlan()
    return BundlePlan(bundle_id=bundle_id, workloads=(web, db), network=network)


def _net(admin_api: Any) -> Any:
    from kubernetes import client  # noqa: PLC0415

    return client.NetworkingV1Api(admin_api)


def _core(admin_api: Any) -> Any:
    from kubernetes import client  # noqa: PLC0415

    return client.CoreV1Api(admin_api)


async def _read(admin_api: Any, api: Any, fn: str, *args: Any) -> dict[str, Any] | None:
    """An object as the API server holds it (plain JSON), or ``None`` when it is absent."""
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    try:
        found = await anyio.to_thread.run_sync(lambda: getattr(api, fn)(*args))
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    body: dict[str, Any] = admin_api.sanitize_for_serialization(found)
    return body


async def _policy(admin_api: Any, ns: str, name: str = "pando-default") -> dict[str, Any] | None:
    return await _read(admin_api, _net(admin_api), "read_namespaced_network_policy", name, ns)


async def _pods(admin_api: Any, ns: str) -> list[dict[str, Any]]:
    listed = await anyio.to_thread.run_sync(lambda: _core(admin_api).list_namespaced_pod(ns))
    pods = [admin_api.sanitize_for_serialization(p) for p in listed.items]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _role(pod: dict[str, Any]) -> str | None:
    return (pod["metadata"].get("labels") or {}).get("pando.dev/role")


async def _gateway_pods(admin_api: Any, ns: str) -> list[dict[str, Any]]:
    return [p for p in await _pods(admin_api, ns) if _role(p) == "egress-gateway"]


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env") or ()}


def _excepted(policy: dict[str, Any]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for rule in policy["spec"]["egress"]:
        for peer in rule.get("to") or ():
            block = peer.get("ipBlock") or {}
            if block.get("cidr") in ("0.0.0.0/0", "::/0"):
                found[block["cidr"]] = block.get("except") or []
    return found


async def test_every_app_namespace_restricts_egress_by_default(
    adapter_config: dict[str, Any], admin_api: Any
) -> None:
    """Unrestricted: own namespace, DNS, the internet except every private range."""
    bundle_id = f"open-{uuid.uuid4().hex[:8]}"
    ns = namespace_for(bundle_id)
    async with KubernetesAdapter(adapter_config) as adapter:
        await adapter.apply(_plan(bundle_id, restricted=False))
        try:
            policy = await _policy(admin_api, ns)
            assert policy is not None
            spec = policy["spec"]
            assert spec["policyTypes"] == ["Ingress", "Egress"]
            assert spec["podSelector"] == {}
            own, dns, internet = spec["egress"]
            assert own == {"to": [{"podSelector": {}}]}
            assert dns["to"][0]["namespaceSelector"]["matchLabels"] == {
                "kubernetes.io/metadata.name": "kube-system"
            }
            assert dns["to"][0]["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
            assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}
            assert "ports" not in internet
            unset = ClusterRanges.from_settings(None, None, None)
            assert _excepted(policy) == {"0.0.0.0/0": unset.family(4), "::/0": unset.family(6)}
            assert all(r in unset.excluded for r in PRIVATE_RANGES if r != "169.254.0.0/16")
            # No gateway without host rules.
            assert await _gateway_pods(admin_api, ns) == []
            details = adapter.health_details()
            assert "pod_cidr and service_cidr unset" in details["egress_excluded_from"]
            assert details["egress_restriction"] == "not verified"
        finally:
            await adapter.destroy(BundleRef(bundle_id))


async def test_configured_ranges_are_the_ones_excluded(
    adapter_config: dict[str, Any], admin_api: Any
) -> None:
    config = {
        **adapter_config,
        "pod_cidr": "10.244.0.0/16",
        "service_cidr": "10.96.0.0/12",
        "api_server_cidr": "192.0.2.10/32",
    }
    bundle_id = f"ranges-{uuid.uuid4().hex[:8]}"
    async with KubernetesAdapter(config) as adapter:
        await adapter.apply(_plan(bundle_id, restricted=False))
        try:
            policy = await _policy(admin_api, namespace_for(bundle_id))
            assert policy is not None
            excepted = _excepted(policy)
            assert excepted["0.0.0.0/0"] == [
                "10.96.0.0/12",
                "10.244.0.0/16",
                "169.254.169.254/32",
                "192.0.2.10/32",
            ]
            assert excepted["::/0"] == [METADATA_ADDRESSES[1]], "the metadata address always"
            assert "settings" in adapter.health_details()["egress_excluded_from"]
        finally:
            await adapter.destroy(BundleRef(bundle_id))


async def test_restricted_egress_is_declared_only_where_enforced(
    adapter_config: dict[str, Any], enforcing: dict[str, Any], admin_api: Any
) -> None:
    """kwok runs no network plugin: nothing verifies egress, so it is not offered."""
    bundle_id = f"honest-{uuid.uuid4().hex[:8]}"
    ns = namespace_for(bundle_id)
    async with KubernetesAdapter(adapter_config) as adapter:
        caps = await adapter.capabilities()
        assert caps.private_network, "trusted by the test settings"
        assert not caps.egress_restriction
        assert not caps.egress_host_names
        with pytest.raises(CapabilityUnsupported) as refused:
            await adapter.apply(_plan(bundle_id, CIDR))
        assert refused.value.capability == "egress_restriction"
    assert await _read(admin_api, _core(admin_api), "read_namespace", ns) is None
    # Enforced (here: vouched for), CIDR rules are offered; host names need the gateway image.
    imageless = {**enforcing, "egress_gateway_image": None}
    async with KubernetesAdapter(imageless) as adapter:
        caps = await adapter.capabilities()
        assert caps.egress_restriction
        assert not caps.egress_host_names
        assert adapter.health_details()["egress_restriction"] == "trusted"
        with pytest.raises(CapabilityUnsupported) as refused:
            await adapter.apply(_plan(bundle_id, CIDR, HOST))
        problems = refused.value.details["problems"]
        assert [(p["path"], p["capability"]) for p in problems] == [
            ("network.egress.allow[1].destination", "egress_host_names")
        ]
        assert await _read(admin_api, _core(admin_api), "read_namespace", ns) is None
        with pytest.raises(InvalidPlan) as invalid:
            await adapter.apply(_plan(bundle_id, EgressRule(destination="169.254.169.254/32")))
        assert [p.path for p in invalid.value.problems] == ["network.egress.allow[0].destination"]
        assert await _read(admin_api, _core(admin_api), "read_namespace", ns) is None
        # The CIDR rule alone runs.
        await adapter.apply(_plan(bundle_id, CIDR))
        try:
            policy = await _policy(admin_api, ns)
            assert policy is not None
            assert policy["spec"]["egress"][2] == {
                "to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}],
                "ports": [{"protocol": "TCP", "port": 5432}, {"protocol": "UDP", "port": 5432}],
            }
        finally:
            await adapter.destroy(BundleRef(bundle_id))


async def test_a_fresh_adapter_looks_before_it_refuses_restricted_egress_and_says_why(
    adapter_config: dict[str, Any], admin_api: Any
) -> None:
    """No ``trust_*`` setting: the first needs of the canary's answer share one run of it.

    kwok runs no network plugin, so the canary's probes never finish: the refusal comes,
    after the canary looked, and its remedy says what it found.
    """
    config = {k: v for k, v in adapter_config.items() if not k.startswith("trust_")} | {
        "canary_wait": 4.0
    }
    bundle_id = f"looked-{uuid.uuid4().hex[:8]}"
    answers: list[Any] = []
    async with KubernetesAdapter(config) as adapter:
        assert adapter.canary_runs == 0

        async def ask() -> None:
            answers.append(await adapter.capabilities())

        async def apply() -> None:
            with pytest.raises(CapabilityUnsupported) as refused:
                await adapter.apply(_plan(bundle_id, CIDR))
            answers.append(refused.value)

        async with anyio.create_task_group() as group:  # all at once, first thing
            group.start_soon(ask)
            group.start_soon(apply)
            group.start_soon(ask)
        assert adapter.canary_runs == 1, "concurrent callers share one run"
        caps = [a for a in answers if not isinstance(a, CapabilityUnsupported)]
        assert len(caps) == 2
        assert not any(c.egress_restriction or c.private_network for c in caps)
        (refusal,) = [a for a in answers if isinstance(a, CapabilityUnsupported)]
        assert refusal.capability == "egress_restriction"
        assert refusal.remedy.startswith(
            "The NetworkPolicy canary looked: the NetworkPolicy canary did not finish in 4 s"
        )
        assert "trust_egress_policy" in refusal.remedy
        await adapter.check_plan(_plan(bundle_id, restricted=False))
        with pytest.raises(CapabilityUnsupported):
            await adapter.check_plan(_plan(bundle_id, CIDR))
        assert adapter.canary_runs == 1, "it looked once"
    assert (
        await _read(admin_api, _core(admin_api), "read_namespace", namespace_for(bundle_id)) is None
    )
    # Trusting NetworkPolicy skips the canary: the refusal says so.
    async with KubernetesAdapter(adapter_config) as trusting:
        with pytest.raises(CapabilityUnsupported) as refused:
            await trusting.apply(_plan(bundle_id, CIDR))
        assert "'trust_network_policy' skips the NetworkPolicy canary" in refused.value.remedy
        assert trusting.canary_runs == 0


async def _assert_gateway(
    admin_api: Any, ns: str, bundle_id: str, rules: tuple[EgressRule, ...]
) -> dict[str, Any]:
    """The gateway's objects are there and serve ``rules``; returns its one live pod."""
    hosts = [r for r in rules if not r.is_cidr]
    configmap = await _read(admin_api, _core(admin_api), "read_namespaced_config_map", GATEWAY, ns)
    assert configmap is not None
    unset = ClusterRanges.from_settings(None, None, None)
    assert configmap["data"][CONFIG_KEY] == squid_config(hosts, unset.excluded)
    service = await _read(admin_api, _core(admin_api), "read_namespaced_service", GATEWAY, ns)
    assert service is not None
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == {
        "pando.dev/bundle": bundle_id,
        "pando.dev/role": "egress-gateway",
    }
    assert [p["port"] for p in service["spec"]["ports"]] == [GATEWAY_PORT]
    policy = await _policy(admin_api, ns, GATEWAY_POLICY)
    assert policy is not None
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": {"pando.dev/role": "egress-gateway"}}
    _dns, outbound = spec["egress"]
    ports = sorted({p for r in hosts for p in r.ports})
    assert [p["port"] for p in outbound["ports"]] == ports
    assert _excepted(policy)["0.0.0.0/0"] == unset.family(4), "never into the cluster"
    (pod,) = await _gateway_pods(admin_api, ns)
    assert pod["metadata"]["labels"]["pando.dev/bundle"] == bundle_id
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["automountServiceAccountToken"] is False
    (container,) = pod["spec"]["containers"]
    assert container["image"] == GATEWAY_IMAGE
    assert pod["spec"]["volumes"][0]["configMap"]["name"] == GATEWAY
    return pod


async def test_host_rules_get_a_gateway_that_follows_the_plan(
    adapter: KubernetesAdapter, admin_api: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pando_runtime.kubernetes.session")
    bundle_id = f"gw-{uuid.uuid4().hex[:8]}"
    ns = namespace_for(bundle_id)
    rules = (CIDR, HOST)
    plan = _plan(bundle_id, *rules)
    calls = adapter.api_calls
    await adapter.apply(plan)
    try:
        retried = sum(getattr(r, "status", None) == 403 for r in caplog.records)
        first = adapter.api_calls - calls - retried  # RBAC catching up: a write made again
        policy = await _policy(admin_api, ns)
        assert policy is not None
        own, _dns, cidr = policy["spec"]["egress"]
        assert own == {"to": [{"podSelector": {}}]}, "the gateway is in the namespace"
        assert cidr["to"] == [{"ipBlock": {"cidr": "203.0.113.0/24"}}]
        assert "ingress" in policy["spec"], "one policy: ingress too"
        gateway = await _assert_gateway(admin_api, ns, bundle_id, rules)
        apps = [p for p in await _pods(admin_api, ns) if _role(p) is None]
        assert len(apps) == 2
        url = f"http://{GATEWAY}.{ns}.svc.cluster.local:{GATEWAY_PORT}"
        for pod in apps:
            env = _env(pod)
            assert env["HTTPS_PROXY"] == env["http_proxy"] == url
            direct = env["NO_PROXY"].split(",")
            assert {"db", "web", f".{ns}.svc", "203.0.113.0/24"} <= set(direct)
        # An unchanged plan writes nothing (and, from the cache, reads nothing).
        calls = adapter.api_calls
        await adapter.apply(plan)
        assert adapter.api_calls == calls, adapter.session.connection.calls_by_kind
        # Two workloads' 12, plus the gateway's Service, ConfigMap, policy and pod.
        assert first <= 16, f"first apply of a restricted plan: {first} calls"
        # A changed host rule: a new gateway pod with the new configuration; apps follow.
        moved = (CIDR, EgressRule(destination="api.example.com", ports=(8443,)))
        await adapter.apply(_plan(bundle_id, *moved))
        replaced = await _assert_gateway(admin_api, ns, bundle_id, moved)
        assert replaced["metadata"]["name"] != gateway["metadata"]["name"]
    finally:
        await adapter.destroy(BundleRef(bundle_id))


async def test_an_ended_gateway_is_replaced_by_the_next_apply(
    adapter: KubernetesAdapter, admin_api: Any
) -> None:
    bundle_id = f"gwend-{uuid.uuid4().hex[:8]}"
    ns = namespace_for(bundle_id)
    plan = _plan(bundle_id, HOST)
    await adapter.apply(plan)
    try:
        ended = await _assert_gateway(admin_api, ns, bundle_id, (HOST,))
        await _end(admin_api, ns, ended["metadata"]["name"])
        with anyio.fail_after(15):
            while any(g.live for g in await adapter.session.reads.gateways(ns)):
                await anyio.sleep(0.1)
        await adapter.apply(plan)
        revived = await _assert_gateway(admin_api, ns, bundle_id, (HOST,))
        assert revived["metadata"]["name"] != ended["metadata"]["name"]
        # Stopping the app stops its gateway; the next apply starts both again.
        await adapter.stop(BundleRef(bundle_id))
        assert await _gateway_pods(admin_api, ns) == []
        await adapter.apply(plan)
        await _assert_gateway(admin_api, ns, bundle_id, (HOST,))
    finally:
        await adapter.destroy(BundleRef(bundle_id))


async def test_dropping_the_host_rules_removes_the_gateway(
    adapter: KubernetesAdapter, admin_api: Any
) -> None:
    bundle_id = f"gwdrop-{uuid.uuid4().hex[:8]}"
    ns = namespace_for(bundle_id)
    await adapter.apply(_plan(bundle_id, CIDR, HOST))
    try:
        await _assert_gateway(admin_api, ns, bundle_id, (CIDR, HOST))
        # No host rule left: the gateway goes, and so do the apps' proxy variables.
        await adapter.apply(_plan(bundle_id, CIDR))
        assert await _gateway_pods(admin_api, ns) == []
        for fn, name in (
            ("read_namespaced_service", GATEWAY),
            ("read_namespaced_config_map", GATEWAY),
        ):
            assert await _read(admin_api, _core(admin_api), fn, name, ns) is None, fn
        assert await _policy(admin_api, ns, GATEWAY_POLICY) is None
        apps = [p for p in await _pods(admin_api, ns) if _role(p) is None]
        assert {p["metadata"]["labels"]["pando.dev/workload"] for p in apps} == {"web", "db"}
        assert all("HTTPS_PROXY" not in _env(p) for p in apps)
        # Unrestricted again: the internet is back in the namespace's policy.
        await adapter.apply(_plan(bundle_id, restricted=False))
        policy = await _policy(admin_api, ns)
        assert policy is not None
        assert set(_excepted(policy)) == {"0.0.0.0/0", "::/0"}
    finally:
        await adapter.destroy(BundleRef(bundle_id))


async def _end(admin_api: Any, ns: str, name: str) -> None:
    """Make kwok report the pod as ended (Squid exited)."""
    status = {"status": {"phase": "Failed"}}
    await anyio.to_thread.run_sync(
        lambda: _core(admin_api).patch_namespaced_pod_status(name, ns, status)
    )


async def test_a_trial_is_held_to_the_app_rules(adapter: KubernetesAdapter, admin_api: Any) -> None:
    """The trial's namespace gets the app's egress rules and a gateway of its own."""
    rules = EgressPolicy(allow=(CIDR, HOST))
    request = TrialRequest(
        trial_id=f"t-{uuid.uuid4().hex[:8]}", image=IMAGE, timeout_seconds=3, egress=rules
    )
    ns = trial_namespace(request.trial_id)
    seen: dict[str, Any] = {}

    async def watch() -> None:
        while "trial" not in seen:
            policy = await _policy(admin_api, ns, "pando-trial-deny")
            pods = await _pods(admin_api, ns) if policy else []
            trial = next((p for p in pods if p["metadata"]["name"] == "trial"), None)
            gateways = [p for p in pods if _role(p) == "egress-gateway"]
            if policy and trial and gateways:
                seen.update(policy=policy, trial=trial, gateway=gateways[0])
            await anyio.sleep(0.1)

    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        result = await adapter.trial(request)
        with anyio.fail_after(5):
            while "trial" not in seen:
                await anyio.sleep(0.05)
        group.cancel_scope.cancel()
    assert result.started
    spec = seen["policy"]["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert not spec.get("ingress"), "nothing connects to a trial"
    assert [r.get("to") for r in spec["egress"]][2] == [{"ipBlock": {"cidr": "203.0.113.0/24"}}]
    assert len(spec["egress"]) == 3, "own namespace, DNS, the CIDR rule: not the internet"
    env = _env(seen["trial"])
    assert env["HTTPS_PROXY"] == f"http://{GATEWAY}.{ns}.svc.cluster.local:{GATEWAY_PORT}"
    assert seen["gateway"]["spec"]["containers"][0]["image"] == GATEWAY_IMAGE
