"""Pure logic of egress: excluded ranges, the policies of each rule kind, the gateway's objects."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from pando_runtime_kubernetes._egress import (
    EGRESS_POLICY,
    GATEWAY_POLICY,
    METADATA_ADDRESSES,
    PRIVATE_RANGES,
    ClusterRanges,
    DnsPeer,
    check_rules,
    egress_policies,
)
from pando_runtime_kubernetes._gateway import (
    CONFIG_KEY,
    GATEWAY,
    GATEWAY_PORT,
    gateway_objects,
    proxy_env,
    squid_config,
)

from pando_runtime import EgressPolicy, EgressRule, InvalidPlan

DNS = DnsPeer("kube-system", {"k8s-app": "kube-dns"})
UNSET = ClusterRanges.from_settings(None, None, None)
LABELS = {"app.kubernetes.io/managed-by": "pando"}


def _excepts(policy: dict[str, Any]) -> dict[str, list[str]]:
    """The internet rule's excepted ranges, by its cidr."""
    found = {}
    for rule in policy["spec"]["egress"]:
        for peer in rule.get("to", ()):
            block = peer.get("ipBlock")
            if block and block["cidr"] in ("0.0.0.0/0", "::/0"):
                found[block["cidr"]] = block.get("except", [])
    return found


def _covered(address: str, ranges: list[str]) -> bool:
    ip = ipaddress.ip_address(address)
    return any(ip in ipaddress.ip_network(r) for r in ranges)


@pytest.mark.parametrize(
    ("excluded", "inside"),
    [
        ("10.0.0.0/8", "10.1.2.3"),
        ("172.16.0.0/12", "172.31.255.1"),
        ("192.168.0.0/16", "192.168.1.1"),
        ("100.64.0.0/10", "100.127.0.1"),
        ("169.254.0.0/16", "169.254.169.254"),
        ("fc00::/7", "fd12:3456::1"),
        ("fe80::/10", "fe80::1"),
    ],
)
def test_unset_cluster_ranges_exclude_every_private_shared_and_link_local_range(
    excluded: str, inside: str
) -> None:
    assert excluded in PRIVATE_RANGES
    assert excluded in UNSET.excluded
    assert not UNSET.configured
    excepts = _excepts(egress_policies("ns", LABELS, None, UNSET, DNS)[0])
    family = "0.0.0.0/0" if ipaddress.ip_address(inside).version == 4 else "::/0"
    assert _covered(inside, excepts[family])
    assert not _covered("8.8.8.8", excepts["0.0.0.0/0"]), "the internet stays reachable"
    assert not _covered("2001:4860::8888", excepts["::/0"])


@pytest.mark.parametrize("metadata", ["169.254.169.254", "fd00:ec2::254"])
def test_the_metadata_address_is_excluded_always(metadata: str) -> None:
    configured = ClusterRanges.from_settings("10.244.0.0/16", "10.96.0.0/12", "203.0.113.10/32")
    assert configured.configured
    assert configured.excluded == (
        "10.96.0.0/12",
        "10.244.0.0/16",
        "169.254.169.254/32",
        "203.0.113.10/32",
        "fd00:ec2::254/128",
    )
    for ranges in (UNSET, configured):
        excepts = _excepts(egress_policies("ns", LABELS, None, ranges, DNS)[0])
        assert _covered(metadata, [*excepts["0.0.0.0/0"], *excepts["::/0"]])
    assert set(METADATA_ADDRESSES) <= set(configured.excluded)


def test_configured_ranges_replace_the_private_ones_and_say_so() -> None:
    dual = ClusterRanges.from_settings(
        "10.244.0.0/16,fd00:10:244::/56", "10.96.0.0/12, fd00:10:96::/112", None
    )
    excepts = _excepts(egress_policies("ns", LABELS, None, dual, DNS)[0])
    assert not _covered("192.168.1.1", excepts["0.0.0.0/0"]), "only the cluster's own ranges"
    assert _covered("10.244.3.4", excepts["0.0.0.0/0"])
    assert _covered("fd00:10:244::5", excepts["::/0"])
    assert "settings" in dual.details()["egress_excluded_from"]
    assert "pod_cidr and service_cidr unset" in UNSET.details()["egress_excluded_from"]
    assert UNSET.details()["egress_excluded"].split(",") == list(UNSET.excluded)
    # Only one of the two set: still the private ranges (plus what was given).
    half = ClusterRanges.from_settings("10.244.0.0/16", None, "198.51.100.1/32")
    assert not half.configured
    assert "192.168.0.0/16" in half.excluded
    assert "198.51.100.1/32" in half.excluded
    with pytest.raises(ValueError, match="does not appear to be"):
        ClusterRanges.from_settings("not-a-cidr", "10.96.0.0/12", None)


def test_the_unrestricted_policy_allows_namespace_dns_and_internet() -> None:
    (policy,) = egress_policies("pando-app", LABELS, None, UNSET, DNS)
    assert policy["metadata"]["name"] == EGRESS_POLICY
    spec = policy["spec"]
    assert spec["podSelector"] == {}
    assert spec["policyTypes"] == ["Egress"]
    own, dns, internet = spec["egress"]
    assert own == {"to": [{"podSelector": {}}]}
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    assert dns["to"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "kube-system"
    }
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert "ports" not in internet, "every port of the internet"


def test_a_cidr_rule_becomes_an_ip_block_with_its_ports() -> None:
    egress = EgressPolicy(
        allow=(
            EgressRule(destination="203.0.113.0/24", ports=(5432, 443)),
            EgressRule(destination="2001:db8::/32"),
            EgressRule(destination="0.0.0.0/0", ports=(25,)),
        )
    )
    (policy,) = egress_policies("ns", LABELS, egress, UNSET, DNS)
    spec = policy["spec"]
    assert spec["podSelector"]["matchExpressions"] == [
        {"key": "pando.dev/role", "operator": "NotIn", "values": ["egress-gateway"]}
    ]
    own, dns, first, second, everywhere = spec["egress"]
    assert own == {"to": [{"podSelector": {}}]}
    assert dns == DNS.rule()
    assert first == {
        "to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}],
        "ports": [
            {"protocol": "TCP", "port": 443},
            {"protocol": "UDP", "port": 443},
            {"protocol": "TCP", "port": 5432},
            {"protocol": "UDP", "port": 5432},
        ],
    }
    assert second == {"to": [{"ipBlock": {"cidr": "2001:db8::/32"}}]}, "no ports: every port"
    # A rule wider than the cluster's ranges never opens them.
    assert set(everywhere["to"][0]["ipBlock"]["except"]) == set(UNSET.family(4))


def test_an_empty_allow_list_leaves_only_the_namespace_and_dns() -> None:
    (policy,) = egress_policies("ns", LABELS, EgressPolicy(), UNSET, DNS)
    assert policy["spec"]["egress"] == [{"to": [{"podSelector": {}}]}, DNS.rule()]


def test_a_host_rule_adds_the_gateway_policy_on_its_ports_only() -> None:
    egress = EgressPolicy(
        allow=(
            EgressRule(destination="api.example.com", ports=(443,)),
            EgressRule(destination="mirror.example.org", ports=(80, 443)),
        )
    )
    app, gateway = egress_policies("ns", LABELS, egress, UNSET, DNS)
    assert len(app["spec"]["egress"]) == 2, "app pods: the namespace (the gateway) and DNS"
    assert gateway["metadata"]["name"] == GATEWAY_POLICY
    assert gateway["spec"]["podSelector"] == {"matchLabels": {"pando.dev/role": "egress-gateway"}}
    dns, outbound = gateway["spec"]["egress"]
    assert dns == DNS.rule()
    assert outbound["ports"] == [{"protocol": "TCP", "port": 80}, {"protocol": "TCP", "port": 443}]
    assert _excepts(gateway)["0.0.0.0/0"] == UNSET.family(4), "the gateway never reaches in"
    unported = EgressPolicy(allow=(EgressRule(destination="api.example.com"),))
    _, gateway = egress_policies("ns", LABELS, unported, UNSET, DNS)
    assert "ports" not in gateway["spec"]["egress"][1]


def test_a_rule_for_the_metadata_address_is_refused_by_path() -> None:
    egress = EgressPolicy(
        allow=(
            EgressRule(destination="203.0.113.0/24"),
            EgressRule(destination="169.254.169.254/32"),
            EgressRule(destination="fd00:ec2::254/128"),
        )
    )
    with pytest.raises(InvalidPlan) as caught:
        check_rules(egress, "network.egress")
    assert [p.path for p in caught.value.problems] == [
        "network.egress.allow[1].destination",
        "network.egress.allow[2].destination",
    ]
    check_rules(EgressPolicy(allow=(EgressRule(destination="169.254.0.0/16"),)), "egress")


def test_the_squid_config_lists_each_host_and_port_and_refuses_the_rest() -> None:
    rules = [
        EgressRule(destination="api.example.com", ports=(443,)),
        EgressRule(destination="mirror.example.org"),
    ]
    config = squid_config(rules, ["10.0.0.0/8", "fc00::/7"]).splitlines()
    assert config[1] == f"http_port {GATEWAY_PORT}"
    # A name not listed is refused before any lookup; listed names resolving inward too.
    order = [line for line in config if line.startswith("http_access")]
    assert order == [
        "http_access deny !listed",
        "http_access deny excluded",
        "http_access allow rule0_host rule0_port",
        "http_access allow rule1_host",
        "http_access deny all",
    ]
    assert "acl listed dstdomain -n api.example.com mirror.example.org" in config
    assert "acl excluded dst 10.0.0.0/8 fc00::/7" in config
    assert "acl rule0_port port 443" in config


def test_the_gateway_objects_follow_the_host_rules() -> None:
    cidr_only = EgressPolicy(allow=(EgressRule(destination="203.0.113.0/24"),))
    assert gateway_objects("ns", "app", cidr_only, UNSET, image="i", labels={}, placement={}) == []
    assert gateway_objects("ns", "app", None, UNSET, image="i", labels={}, placement={}) == []
    egress = EgressPolicy(allow=(EgressRule(destination="api.example.com", ports=(443,)),))
    configmap, service, deployment = gateway_objects(
        "ns",
        "app",
        egress,
        UNSET,
        image="registry.example/squid:5",
        labels=LABELS,
        placement={"runtimeClassName": "gvisor"},
    )
    assert {o["metadata"]["name"] for o in (configmap, service, deployment)} == {GATEWAY}
    assert "api.example.com" in configmap["data"][CONFIG_KEY]
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"][0]["port"] == GATEWAY_PORT
    template = deployment["spec"]["template"]
    assert template["metadata"]["labels"]["pando.dev/role"] == "egress-gateway"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    pod = template["spec"]
    assert pod["runtimeClassName"] == "gvisor"
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    assert container["image"] == "registry.example/squid:5"
    assert container["command"][:2] == ["squid", "-N"]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False}
    assert "hostPort" not in container["ports"][0]
    changed = EgressPolicy(allow=(EgressRule(destination="api.example.com", ports=(8443,)),))
    _, _, rolled = gateway_objects(
        "ns", "app", changed, UNSET, image="i", labels=LABELS, placement={}
    )
    digest = "pando.dev/gateway-config"
    assert (
        rolled["spec"]["template"]["metadata"]["annotations"][digest]
        != template["metadata"]["annotations"][digest]
    ), "a changed allow-list rolls the gateway pod"


def test_proxy_variables_point_at_the_gateway_and_keep_local_names_direct() -> None:
    egress = EgressPolicy(
        allow=(
            EgressRule(destination="api.example.com", ports=(443,)),
            EgressRule(destination="203.0.113.0/24"),
        )
    )
    env = proxy_env("pando-app", "cluster.local", egress, ["web", "db"])
    url = f"http://{GATEWAY}.pando-app.svc.cluster.local:{GATEWAY_PORT}"
    assert env["HTTPS_PROXY"] == env["https_proxy"] == url
    assert env["HTTP_PROXY"] == env["http_proxy"] == url
    direct = env["NO_PROXY"].split(",")
    assert {"localhost", "web", "db", ".pando-app.svc", "203.0.113.0/24"} <= set(direct)
    assert env["no_proxy"] == env["NO_PROXY"]
    cidr_only = EgressPolicy(allow=(EgressRule(destination="203.0.113.0/24"),))
    assert proxy_env("pando-app", "cluster.local", cidr_only, ["web"]) == {}
    assert proxy_env("pando-app", "cluster.local", None, ["web"]) == {}
