"""Pure logic of egress: excluded ranges, the policies of each rule kind, the gateway's objects."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from pando_runtime_kubernetes.manifests._egress import (
    GATEWAY_POLICY,
    METADATA_ADDRESSES,
    PRIVATE_RANGES,
    ClusterRanges,
    DnsPeer,
    egress_rules,
    gateway_policy,
    rule_problems,
)
from pando_runtime_kubernetes.manifests._gateway import (
    CONFIG_KEY,
    GATEWAY,
    GATEWAY_PORT,
    config_digest,
    gateway_config,
    gateway_objects,
    gateway_pod,
    proxy_env,
    squid_config,
)
from pando_runtime_kubernetes.manifests._namespace_objects import network_policy

from pando_runtime import EgressPolicy, EgressRule

DNS = DnsPeer("kube-system", {"k8s-app": "kube-dns"})
UNSET = ClusterRanges.from_settings(None, None, None)
LABELS = {"app.kubernetes.io/managed-by": "pando"}


def _app_policy(egress: EgressPolicy | None, ranges: ClusterRanges) -> dict[str, Any]:
    """The namespace's policy (ingress and egress) as the adapter writes it."""
    rules = egress_rules(egress, ranges, DNS)
    return network_policy("ns", "app", rules)


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
    excepts = _excepts(_app_policy(None, UNSET))
    family = "0.0.0.0/0" if ipaddress.ip_address(inside).version == 4 else "::/0"
    assert _covered(inside, excepts[family])
    assert not _covered("8.8.8.8", excepts["0.0.0.0/0"]), "the internet stays reachable"
    assert not _covered("2001:4860::8888", excepts["::/0"])


def test_the_nodes_own_addresses_are_excluded_when_named() -> None:
    ranges = ClusterRanges.from_settings(
        "198.18.0.0/24", "10.96.0.0/16", None, node_cidr="198.19.0.0/24"
    )
    assert "198.19.0.0/24" in ranges.excluded
    assert "node_cidr" in ranges.details()["egress_excluded_from"]
    excepts = _excepts(_app_policy(None, ranges))
    assert _covered("198.19.0.2", excepts["0.0.0.0/0"]), "a node's kubelet is out of reach"
    without = ClusterRanges.from_settings("198.18.0.0/24", "10.96.0.0/16", None)
    assert not _covered("198.19.0.2", _excepts(_app_policy(None, without))["0.0.0.0/0"])


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
        excepts = _excepts(_app_policy(None, ranges))
        assert _covered(metadata, [*excepts["0.0.0.0/0"], *excepts["::/0"]])
    assert set(METADATA_ADDRESSES) <= set(configured.excluded)


def test_configured_ranges_replace_the_private_ones_and_say_so() -> None:
    dual = ClusterRanges.from_settings(
        "10.244.0.0/16,fd00:10:244::/56", "10.96.0.0/12, fd00:10:96::/112", None
    )
    excepts = _excepts(_app_policy(None, dual))
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
    policy = _app_policy(None, UNSET)
    assert policy["metadata"]["name"] == "pando-default", "one policy: ingress and egress"
    spec = policy["spec"]
    assert spec["podSelector"] == {}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"][0]["from"][0] == {"podSelector": {}}
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
    spec = _app_policy(egress, UNSET)["spec"]
    assert spec["podSelector"] == {}, "every pod; the gateway's own policy widens its egress"
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
    policy = _app_policy(EgressPolicy(), UNSET)
    assert policy["spec"]["egress"] == [{"to": [{"podSelector": {}}]}, DNS.rule()]


def test_a_host_rule_adds_the_gateway_policy_on_its_ports_only() -> None:
    egress = EgressPolicy(
        allow=(
            EgressRule(destination="api.example.com", ports=(443,)),
            EgressRule(destination="mirror.example.org", ports=(80, 443)),
        )
    )
    app = _app_policy(egress, UNSET)
    assert len(app["spec"]["egress"]) == 2, "app pods: the namespace (the gateway) and DNS"
    gateway = gateway_policy("ns", LABELS, egress, UNSET, DNS)
    assert gateway is not None
    assert gateway["metadata"]["name"] == GATEWAY_POLICY
    assert gateway["spec"]["podSelector"] == {"matchLabels": {"pando.dev/role": "egress-gateway"}}
    assert gateway["spec"]["ingress"] == [{"from": [{"podSelector": {}}]}], "its namespace only"
    dns, outbound = gateway["spec"]["egress"]
    assert dns == DNS.rule()
    assert outbound["ports"] == [{"protocol": "TCP", "port": 80}, {"protocol": "TCP", "port": 443}]
    assert _excepts(gateway)["0.0.0.0/0"] == UNSET.family(4), "the gateway never reaches in"
    unported = EgressPolicy(allow=(EgressRule(destination="api.example.com"),))
    gateway = gateway_policy("ns", LABELS, unported, UNSET, DNS)
    assert gateway is not None
    assert "ports" not in gateway["spec"]["egress"][1]
    cidr_only = EgressPolicy(allow=(EgressRule(destination="203.0.113.0/24"),))
    assert gateway_policy("ns", LABELS, cidr_only, UNSET, DNS) is None


def test_a_rule_for_the_metadata_address_is_refused_by_path() -> None:
    egress = EgressPolicy(
        allow=(
            EgressRule(destination="203.0.113.0/24"),
            EgressRule(destination="169.254.169.254/32"),
            EgressRule(destination="fd00:ec2::254/128"),
        )
    )
    assert [p.path for p in rule_problems(egress, "network.egress")] == [
        "network.egress.allow[1].destination",
        "network.egress.allow[2].destination",
    ]
    wider = EgressPolicy(allow=(EgressRule(destination="169.254.0.0/16"),))
    assert rule_problems(wider, "egress") == []


def test_a_rule_inside_the_nodes_or_the_api_servers_range_is_refused_by_path() -> None:
    ranges = ClusterRanges.from_settings(
        "10.244.0.0/16", "10.96.0.0/12", "192.0.2.10/32", node_cidr="198.19.0.0/24"
    )
    assert ranges.forbidden == ("192.0.2.10/32", "198.19.0.0/24")
    egress = EgressPolicy(
        allow=(
            EgressRule(destination="198.19.0.3/32", ports=(10250,)),  # a node's kubelet
            EgressRule(destination="192.0.2.10/32"),  # the API server
            EgressRule(destination="198.19.0.0/16"),  # only contains the nodes: excepted
            EgressRule(destination="10.244.1.0/24"),  # pods: their own policies decide
        )
    )
    problems = rule_problems(egress, "network.egress", ranges.forbidden)
    assert [(p.path, p.code) for p in problems] == [
        ("network.egress.allow[0].destination", "forbidden_destination"),
        ("network.egress.allow[1].destination", "forbidden_destination"),
    ]
    assert "198.19.0.0/24" in problems[0].message
    assert ranges.inside("198.19.0.0/16") == ["198.19.0.0/24"]
    # Without the settings nothing is forbidden but the metadata address.
    assert rule_problems(egress, "egress") == []


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
        "http_access deny !literal !listed",
        "http_access deny refused",
        "http_access allow !literal rule0 rule0_port",
        "http_access allow !literal rule1",
        "http_access deny all",
    ]
    assert "acl listed dstdomain -n api.example.com mirror.example.org" in config
    assert "acl refused dst 10.0.0.0/8 fc00::/7" in config
    assert "acl rule0_port port 443" in config


def test_the_gateway_objects_follow_the_host_rules() -> None:
    cidr_only = EgressPolicy(allow=(EgressRule(destination="203.0.113.0/24"),))
    assert gateway_config(cidr_only, UNSET) is None
    assert gateway_config(None, UNSET) is None
    egress = EgressPolicy(allow=(EgressRule(destination="api.example.com", ports=(443,)),))
    config = gateway_config(egress, UNSET)
    assert config is not None
    service, configmap = gateway_objects("ns", "app", config, labels=LABELS)
    assert {o["metadata"]["name"] for o in (configmap, service)} == {GATEWAY}
    assert "api.example.com" in configmap["data"][CONFIG_KEY]
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"][0]["port"] == GATEWAY_PORT
    digest = config_digest(config)
    pod = gateway_pod(
        "ns",
        digest,
        image="registry.example/squid:5",
        labels={**LABELS, "pando.dev/bundle": "app"},
        placement={"runtimeClassName": "gvisor"},
        replaces=None,
    )
    meta = pod["metadata"]
    assert meta["labels"]["pando.dev/role"] == "egress-gateway"
    assert meta["annotations"]["pando.dev/plan-digest"] == digest
    assert meta["name"].startswith(GATEWAY + "-")
    assert service["spec"]["selector"].items() <= meta["labels"].items()
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never", "a bare pod, as app pods are"
    assert spec["runtimeClassName"] == "gvisor"
    assert spec["automountServiceAccountToken"] is False
    (container,) = spec["containers"]
    assert container["image"] == "registry.example/squid:5"
    assert container["command"][:2] == ["squid", "-N"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert "hostPort" not in container["ports"][0]
    changed = EgressPolicy(allow=(EgressRule(destination="api.example.com", ports=(8443,)),))
    new_config = gateway_config(changed, UNSET)
    assert new_config is not None
    assert config_digest(new_config) != digest
    rolled = gateway_pod(
        "ns", config_digest(new_config), image="i", labels=LABELS, placement={}, replaces=None
    )
    assert rolled["metadata"]["name"] != meta["name"], "a changed allow-list makes a new pod"
    again = gateway_pod("ns", digest, image="i", labels=LABELS, placement={}, replaces=None)
    assert again["metadata"]["name"] == meta["name"], "two writers derive one name"


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


def test_bad_network_settings_are_refused_naming_each_setting() -> None:
    from pando_runtime_kubernetes._info import KubernetesConfig  # noqa: PLC0415
    from pando_runtime_kubernetes.manifests._network import AppNetwork  # noqa: PLC0415

    from pando_runtime import InvalidConfig  # noqa: PLC0415

    config = KubernetesConfig(
        pod_cidr="10.244.0.0/16,nonsense",
        service_cidr="10.96.0.0/33",
        api_server_cidr="203.0.113.10/32",
        dns_namespace="Kube_System",
        dns_labels={},
        egress_gateway_image="not an image",
    )
    with pytest.raises(InvalidConfig) as caught:
        AppNetwork(config)
    found = {(p.path, p.code) for p in caught.value.problems}
    assert found == {
        ("pod_cidr", "invalid_cidr"),
        ("service_cidr", "invalid_cidr"),
        ("dns_namespace", "invalid"),
        ("dns_labels", "required"),
        ("egress_gateway_image", "invalid_image"),
    }
    assert caught.value.code == "INVALID_CONFIG"
    network = AppNetwork(KubernetesConfig(pod_cidr="10.244.0.0/16", service_cidr="10.96.0.0/12"))
    assert network.ranges.configured
    assert network.details()["egress_excluded"].startswith("10.96.0.0/12,10.244.0.0/16")


def test_a_workload_may_not_take_the_gateway_name_when_a_gateway_is_needed() -> None:
    from pando_runtime_kubernetes._info import KubernetesConfig  # noqa: PLC0415
    from pando_runtime_kubernetes.manifests._network import AppNetwork  # noqa: PLC0415

    from pando_runtime import WorkloadPlan  # noqa: PLC0415

    network = AppNetwork(KubernetesConfig(egress_gateway_image="registry.example/squid:5"))
    workloads = (WorkloadPlan(name="web", image="i:1"), WorkloadPlan(name=GATEWAY, image="i:1"))
    hosts = EgressPolicy(allow=(EgressRule(destination="api.example.com"),))
    problems = network.problems(hosts, "network.egress", workloads)
    assert [(p.path, p.code) for p in problems] == [("workloads[1].name", "reserved")]
    cidr_only = EgressPolicy(allow=(EgressRule(destination="203.0.113.0/24"),))
    assert network.problems(cidr_only, "network.egress", workloads) == []  # no gateway


def test_a_trial_is_held_to_the_app_rules() -> None:
    from pando_runtime_kubernetes._info import KubernetesConfig  # noqa: PLC0415
    from pando_runtime_kubernetes.features._trial import trial_objects  # noqa: PLC0415
    from pando_runtime_kubernetes.manifests._network import AppNetwork  # noqa: PLC0415
    from pando_runtime_kubernetes.manifests._workload_objects import PodSettings  # noqa: PLC0415

    from pando_runtime import TrialRequest  # noqa: PLC0415

    network = AppNetwork(KubernetesConfig(egress_gateway_image="registry.example/squid:5"))

    def objects(egress: EgressPolicy | None) -> dict[tuple[str, str], dict[str, Any]]:
        request = TrialRequest(trial_id="t1", image="registry.example/app:1", egress=egress)
        docs = trial_objects(
            request,
            subject=None,
            role="r",
            observer_image="busybox:1.37",
            settings=PodSettings(),
            wait=10,
            network=network,
        )
        return {(d["kind"], d["metadata"]["name"]): d for d in docs}

    open_ = objects(None)
    spec = open_["NetworkPolicy", "pando-trial-deny"]["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in spec, "nothing connects to a trial"
    assert spec["egress"] == network.policy_rules(None)
    assert not [k for k in open_ if k[1] == GATEWAY or k[1].startswith(GATEWAY + "-")]
    hosts = EgressPolicy(
        allow=(
            EgressRule(destination="203.0.113.0/24"),
            EgressRule(destination="api.example.com", ports=(443,)),
        )
    )
    held = objects(hosts)
    assert held["NetworkPolicy", "pando-trial-deny"]["spec"]["egress"] == network.policy_rules(
        hosts
    )
    assert ("Service", GATEWAY) in held
    assert ("ConfigMap", GATEWAY) in held
    assert ("NetworkPolicy", GATEWAY_POLICY) in held
    (gateway,) = [d for (kind, name), d in held.items() if kind == "Pod" and name != "trial"]
    assert gateway["metadata"]["labels"]["pando.dev/role"] == "egress-gateway"
    app = held["Pod", "trial"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in app["env"]}
    assert env["HTTPS_PROXY"].startswith(f"http://{GATEWAY}.pando-trial-t1.svc.")
