"""Exposure (pure logic, no server): which pods the host's proxy and the edge may reach, and how.

The namespace's own policy admits only the app's pods; each exposed workload with ports has a
policy of its own admitting the host's server pods and the edge's pods on exactly its ports.
The namespace names the exposed workloads, each with the digest of its policy, so an unchanged
plan writes nothing and a change writes only what changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import pytest
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import namespace_for
from pando_runtime_kubernetes.cache._projections import NamespaceFacts, project_namespace
from pando_runtime_kubernetes.cache._warm import _decode, _encode
from pando_runtime_kubernetes.features._edge import edge_objects
from pando_runtime_kubernetes.features._namespaces import AppNamespaces
from pando_runtime_kubernetes.manifests import _namespace_objects as ns_objects
from pando_runtime_kubernetes.manifests import _workload_objects as workload_objects
from pando_runtime_kubernetes.manifests._network import AppNetwork

from pando_runtime import BundlePlan, EdgePlan, EdgePort, Port, PortProtocol, WorkloadPlan

pytestmark = pytest.mark.anyio

NS = "pando-shop"
SERVER = ("pando", {"app.kubernetes.io/name": "pando-server"})
PEERS = ns_objects.outside_peers(*SERVER, "pando-edge")
WEB = WorkloadPlan(
    name="web",
    image="registry.example/web:1",
    ports=(Port(8080), Port(8443), Port(5353, PortProtocol.UDP)),
    exposed=True,
)
DB = WorkloadPlan(name="db", image="registry.example/db:1", ports=(Port(5432),))
WORKER = WorkloadPlan(name="worker", image="registry.example/worker:1", exposed=True)
"""Exposed but with no port: nothing to admit, so no policy."""


def _plan(*workloads: WorkloadPlan) -> BundlePlan:
    return BundlePlan(bundle_id="shop", workloads=workloads or (WEB, DB, WORKER))


def _selects(policy: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    wanted = policy["spec"]["podSelector"].get("matchLabels") or {}
    labels = pod["metadata"]["labels"]
    return all(labels.get(k) == v for k, v in wanted.items())


def _pod(w: WorkloadPlan) -> dict[str, Any]:
    plan_labels = {"team": "shop", "pando.dev/workload": "forged"}  # ours win over the plan's
    return workload_objects.pod(
        NS, "shop", w, "d1", workload_objects.PodSettings(), pull=False, plan_labels=plan_labels
    )


def test_the_namespace_policy_admits_only_the_apps_own_pods() -> None:
    policy = ns_objects.network_policy(NS, "shop")
    assert policy["spec"]["podSelector"] == {}
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {}}]}]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (policy,) = [
        o
        for o in ns_objects.namespace_objects(NS, _plan(), subject=None, role="r", egress=[])
        if o["kind"] == "NetworkPolicy"
    ]
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {}}]}], "no server peer"
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]


def test_an_exposed_workload_admits_the_host_and_the_edge_on_its_ports_alone() -> None:
    (policy,) = ns_objects.exposure_policies(NS, _plan(), PEERS)
    assert policy["kind"] == "NetworkPolicy"
    assert policy["metadata"]["name"] == "pando-expose-web"
    assert policy["metadata"]["namespace"] == NS
    assert policy["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "pando"
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    assert "egress" not in spec
    (rule,) = spec["ingress"]
    assert rule["ports"] == [
        {"protocol": "TCP", "port": 8080},
        {"protocol": "TCP", "port": 8443},
        {"protocol": "UDP", "port": 5353},
    ]
    server, edge = rule["from"]
    assert server == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "pando"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "pando-server"}},
    }
    assert edge == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "pando-edge"}},
        "podSelector": {
            "matchLabels": {"app.kubernetes.io/managed-by": "pando", "pando.dev/role": "edge"}
        },
    }
    # It selects the workload's pods (as the adapter labels them), and no other pod.
    assert _selects(policy, _pod(WEB))
    assert not _selects(policy, _pod(DB))
    assert not _selects(policy, _pod(attrs.evolve(WEB, name="web2")))


def test_the_edge_peer_matches_every_edge_pod() -> None:
    (_, edge) = PEERS
    for name in ("public", "internal"):
        plan = EdgePlan(
            name=name,
            image="registry.example/edge:1",
            ports=(EdgePort(published=443, target=8443),),
        )
        docs = edge_objects(
            plan,
            namespace="pando-edge",
            digest="d",
            service_type="LoadBalancer",
            placement=workload_objects.PodSettings(),
        )
        (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert edge["podSelector"]["matchLabels"].items() <= labels.items()


def test_only_exposed_workloads_with_ports_get_a_policy() -> None:
    assert [w.name for w in ns_objects.exposed_workloads(_plan())] == ["web"]
    assert ns_objects.exposure_policies(NS, _plan(DB, WORKER), PEERS) == []
    assert ns_objects.exposure_marks([]) == ()
    api = attrs.evolve(DB, name="api", exposed=True)
    names = [
        p["metadata"]["name"] for p in ns_objects.exposure_policies(NS, _plan(WEB, api), PEERS)
    ]
    assert names == ["pando-expose-api", "pando-expose-web"], "by name: order is no change"


def _marks(plan: BundlePlan, peers: list[dict[str, Any]] = PEERS) -> dict[str, str]:
    return ns_objects.read_marks(
        ns_objects.exposure_marks(ns_objects.exposure_policies(NS, plan, peers))
    )


def test_an_exposure_mark_follows_ports_and_peers_and_nothing_else() -> None:
    marks = _marks(_plan())
    assert list(marks) == ["web"]
    assert len(marks["web"]) == 16
    same = _plan(WORKER, DB, attrs.evolve(WEB, env={"A": "1"}, image="registry.example/web:2"))
    assert _marks(same) == marks, "what the workload runs is not its exposure"
    assert _marks(_plan(attrs.evolve(WEB, ports=(Port(8081),)))) != marks
    assert _marks(_plan(), ns_objects.outside_peers(*SERVER, "edge-2")) != marks
    api = attrs.evolve(DB, name="api", exposed=True)
    assert _marks(_plan(WEB, api))["web"] == marks["web"], "one policy's mark is its own"


def test_a_namespace_that_exposes_nothing_is_written_as_before() -> None:
    plan = _plan(DB)
    plain = ns_objects.namespace(NS, plan, "d")
    assert ns_objects.namespace(NS, plan, "d", exposed=()) == plain
    assert "pando.dev/exposed" not in plain["metadata"]["annotations"]
    assert project_namespace(plain).exposed == ()
    marked = ns_objects.namespace(NS, _plan(), "d", exposed=("api=1234", "web="))
    assert marked["metadata"]["annotations"]["pando.dev/exposed"] == "api=1234,web="
    facts = project_namespace(marked)
    assert facts.exposed == ("api=1234", "web=")
    assert ns_objects.read_marks(facts.exposed) == {"api": "1234", "web": ""}
    assert _decode("n", _encode(facts)).exposed == facts.exposed, "the warm cache keeps them"


class _Session:
    """What ``AppNamespaces.converge`` asks of a session, recorded (the namespace exists).

    Its reads (``reads.namespace``) and its writes (``writer.apply``, ``writer.delete``).
    """

    def __init__(self) -> None:
        self.facts: NamespaceFacts | None = None
        self.writes: list[str] = []
        self.reads = self.writer = self

    async def namespace(self, ns: str) -> NamespaceFacts | None:
        return self.facts

    async def apply(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self.writes.append(f"apply {body['kind']} {body['metadata']['name']}")
        if body["kind"] == "Namespace":
            self.facts = project_namespace(body)
        return dict(body)

    async def delete(self, ns: str | None, plural: str, name: str, group: str = "") -> None:
        self.writes.append(f"delete {plural} {name}")

    async def take(self, plan: BundlePlan, namespaces: AppNamespaces) -> list[str]:
        self.writes = []
        await namespaces.converge(namespace_for(plan.bundle_id), plan)
        return self.writes


async def test_converge_writes_exposure_apart_and_deletes_a_policy_no_longer_wanted() -> None:
    adapter = KubernetesAdapter({"server_namespace": SERVER[0], "server_labels": SERVER[1]})
    session = _Session()
    stub: Any = session  # only what converge asks of a ClusterSession
    namespaces = AppNamespaces(stub, adapter.config, AppNetwork(adapter.config))
    hidden = _plan(attrs.evolve(WEB, exposed=False), DB)
    session.facts = project_namespace(ns_objects.namespace(NS, hidden))  # made, nothing applied
    base = [
        "apply ServiceAccount default",
        "apply NetworkPolicy pando-default",
        "apply ResourceQuota pando-quota",
    ]
    assert await session.take(hidden, namespaces) == [*base, f"apply Namespace {NS}"]
    assert await session.take(hidden, namespaces) == [], "unchanged: nothing written"
    exposed = _plan(WEB, DB)
    assert await session.take(exposed, namespaces) == [
        "apply NetworkPolicy pando-expose-web",
        f"apply Namespace {NS}",
    ]
    assert session.facts is not None
    assert list(ns_objects.read_marks(session.facts.exposed)) == ["web"]
    assert await session.take(exposed, namespaces) == []
    moved = _plan(attrs.evolve(WEB, ports=(Port(9090),)), DB)
    assert await session.take(moved, namespaces) == [
        "apply NetworkPolicy pando-expose-web",
        f"apply Namespace {NS}",
    ]
    assert await session.take(hidden, namespaces) == [
        "delete networkpolicies pando-expose-web",
        f"apply Namespace {NS}",
    ]
    assert session.facts.exposed == ()
    # Of two exposed workloads, only the one that changed is written again.
    api = attrs.evolve(DB, name="api", exposed=True)
    both = _plan(WEB, DB, api)
    assert await session.take(both, namespaces) == [
        # Widening first; then, a workload added, the namespace-wide objects again.
        "apply NetworkPolicy pando-expose-api",
        "apply NetworkPolicy pando-expose-web",
        *base,
        f"apply Namespace {NS}",
    ]
    api_moved = _plan(WEB, DB, attrs.evolve(api, ports=(Port(6000),)))
    assert await session.take(api_moved, namespaces) == [
        "apply NetworkPolicy pando-expose-api",
        f"apply Namespace {NS}",
    ]
    # A removed workload loses its policy too.
    assert await session.take(_plan(WEB, DB), namespaces) == [
        *base,
        "delete networkpolicies pando-expose-api",
        f"apply Namespace {NS}",
    ]


async def test_the_role_binding_comes_first_in_a_new_namespace_exposure_in_an_old_one() -> None:
    adapter = KubernetesAdapter({"app_subject": "User:pando"})
    session = _Session()
    stub: Any = session
    namespaces = AppNamespaces(stub, adapter.config, AppNetwork(adapter.config))
    session.facts = project_namespace(ns_objects.namespace(NS, _plan()))  # just made
    base = [
        "apply RoleBinding pando-app-manager",
        "apply ServiceAccount default",
        "apply NetworkPolicy pando-default",
        "apply ResourceQuota pando-quota",
    ]
    first = await session.take(_plan(), namespaces)
    assert first == [*base, "apply NetworkPolicy pando-expose-web", f"apply Namespace {NS}"]
    # As after an upgrade: a converged namespace whose objects changed, nothing exposed yet.
    session.facts = project_namespace(ns_objects.namespace(NS, _plan(), "older"))
    again = await session.take(_plan(), namespaces)
    assert again == ["apply NetworkPolicy pando-expose-web", *base, f"apply Namespace {NS}"]


async def test_a_destroy_that_keeps_volumes_deletes_the_exposure_policies() -> None:
    adapter = KubernetesAdapter({})
    session = _Session()
    stub: Any = session
    namespaces = AppNamespaces(stub, adapter.config, AppNetwork(adapter.config))
    session.facts = project_namespace(ns_objects.namespace(NS, _plan(), "d", exposed=("web=ab",)))
    await namespaces.mark_volumes_only(NS, "shop", session.facts)
    assert session.writes == [f"apply Namespace {NS}", "delete networkpolicies pando-expose-web"]
    assert session.facts.volumes_only
    # Until an apply, the namespace still names what may be left (an interrupted destroy).
    assert session.facts.exposed == ("web=",)
    assert await session.take(_plan(), namespaces) == [
        "apply ServiceAccount default",
        "apply NetworkPolicy pando-default",
        "apply ResourceQuota pando-quota",
        "apply NetworkPolicy pando-expose-web",
        f"apply Namespace {NS}",
    ]
    assert await session.take(_plan(DB), namespaces) == [
        "apply ServiceAccount default",
        "apply NetworkPolicy pando-default",
        "apply ResourceQuota pando-quota",
        "delete networkpolicies pando-expose-web",
        f"apply Namespace {NS}",
    ]
