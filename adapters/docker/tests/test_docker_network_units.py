"""The network manifests, pure: the guard's script, the gateway's rules, the proxy env.

No daemon: what each builds is read as text. The effect of each is tested on real
containers in ``test_docker_network.py`` and ``test_docker_restricted_egress.py``.
"""

from __future__ import annotations

from pando_runtime_docker.manifests import (
    GATEWAY_ALIAS,
    Allowed,
    GatewayNames,
    Naming,
    edge_bridge,
    guard_chain,
    guard_request,
    guard_script,
    private_chain,
    private_script,
    proxy_env,
    squid_config,
)

import pando_runtime as pr


def test_the_guard_chain_fits_iptables_and_differs_by_owner_and_pool() -> None:
    one = guard_chain("pando", "10.231.0.0/16")
    assert len(one) <= 28  # iptables' limit on a chain's name
    assert one == guard_chain("pando", "10.231.0.0/16")
    assert one != guard_chain("other", "10.231.0.0/16")
    assert one != guard_chain("pando", "10.232.0.0/16")


def test_the_guard_script_returns_the_pool_before_rejecting_and_jumps_once() -> None:
    script = guard_script("PANDO-EGRESS-x", "10.231.7.0/16")
    lines = script.splitlines()
    returns = lines.index("iptables -w -A PANDO-EGRESS-x -d 10.231.0.0/16 -j RETURN")
    rejects = [i for i, line in enumerate(lines) if "-j REJECT" in line]
    assert rejects
    assert all(i > returns for i in rejects), "the pool's own traffic returns first"
    assert any("-d 169.254.0.0/16 -j REJECT" in line for line in lines)
    dns = lines.index("iptables -w -A PANDO-EGRESS-x -p udp --dport 53 -j RETURN")
    assert dns < min(rejects), "lookups reach the daemon's resolver, wherever it is"
    # The jump is checked before it is inserted: running the script twice leaves one.
    assert lines[-1] == (
        "iptables -w -C DOCKER-USER -s 10.231.0.0/16 -j PANDO-EGRESS-x 2>/dev/null "
        "|| iptables -w -I DOCKER-USER -s 10.231.0.0/16 -j PANDO-EGRESS-x"
    )


def test_the_guard_helper_runs_on_the_host_network_with_net_admin_and_no_owner_label() -> None:
    naming = Naming(owner="pando")
    body = guard_request(naming, "img", "true")
    assert body["HostConfig"]["NetworkMode"] == "host"
    assert "NET_ADMIN" in body["HostConfig"]["CapAdd"]
    assert naming.owner_key not in body["Labels"], "the view of bundles must not list it"


def test_squid_refuses_unlisted_names_before_any_address_rule() -> None:
    rules = (
        pr.EgressRule(destination="203.0.113.0/24", ports=(443,)),
        pr.EgressRule(destination="API.example.com"),
    )
    lines = squid_config(rules).splitlines()
    first_dst = next(i for i, line in enumerate(lines) if " dst " in line)
    deny_unlisted = lines.index("http_access deny !literal !listed")
    assert deny_unlisted < first_dst, "a name no rule lists is refused before any lookup"
    assert "acl listed dstdomain -n api.example.com" in lines
    assert "http_access allow literal rule0 rule0_port" in lines
    assert "acl rule0_port port 443" in lines
    # The private-range refusal comes after the CIDR rules and before the host rules.
    blocked = lines.index("http_access deny refused")
    assert lines.index("http_access allow literal rule0 rule0_port") < blocked
    assert blocked < lines.index("http_access allow !literal rule1")
    assert lines[-1] == "http_access deny all"


def test_squid_with_cidr_rules_only_refuses_every_name() -> None:
    lines = squid_config((pr.EgressRule(destination="198.51.100.7/32"),)).splitlines()
    assert "http_access deny !literal" in lines
    assert not any("dstdomain" in line for line in lines)


def test_proxy_env_names_the_gateway_only_when_something_is_allowed() -> None:
    allowed = pr.EgressPolicy(allow=(pr.EgressRule(destination="api.example.com"),))
    env = proxy_env(allowed, ["web", "db"])
    assert env["HTTPS_PROXY"] == env["http_proxy"] == f"http://{GATEWAY_ALIAS}:3128"
    assert env["NO_PROXY"].split(",")[-2:] == ["db", "web"]
    assert proxy_env(pr.EgressPolicy(allow=()), ["web"]) == {}
    assert proxy_env(None, ["web"]) == {}


def test_gateway_objects_carry_labels_apart_from_the_bundles() -> None:
    naming = Naming(owner="pando")
    names = GatewayNames(naming, "shop")
    assert naming.owner_key not in names.labels
    assert names.container == "pando.shop.egress.gateway"
    assert names.network != naming.network_name("shop")


def test_the_host_chain_lets_replies_and_lookups_through_and_rejects_the_rest() -> None:
    lines = guard_script("PANDO-EGRESS-x", "10.231.0.0/16", host="PANDO-HOST-x").splitlines()
    own = [line for line in lines if "-A PANDO-HOST-x" in line]
    assert "--ctstate ESTABLISHED,RELATED -j RETURN" in own[0], "upstream's replies pass"
    assert "--dport 53 -j RETURN" in own[1]
    assert own[-1].endswith("-j REJECT --reject-with icmp-host-prohibited")
    assert lines[-1] == (
        "iptables -w -C INPUT -s 10.231.0.0/16 -j PANDO-HOST-x 2>/dev/null "
        "|| iptables -w -I INPUT -s 10.231.0.0/16 -j PANDO-HOST-x"
    )


def test_private_names_fit_iptables_and_linux() -> None:
    assert len(private_chain("a" * 32, "b" * 63)) <= 28  # iptables' limit
    assert private_chain("pando", "one") != private_chain("pando", "two")
    assert private_chain("pando", "one") != private_chain("other", "one")
    assert len(edge_bridge("a" * 32)) <= 15  # IFNAMSIZ - 1
    assert edge_bridge("pando") != edge_bridge("other")


def test_the_private_script_opens_only_the_listed_ports() -> None:
    script = private_script(
        "PANDO-X-1", "10.231.4.0/24", "pando-e1", (Allowed("10.231.4.2", 8080, "tcp"),)
    )
    lines = script.splitlines()
    accept = "iptables -w -A PANDO-X-1 -d 10.231.4.2 -p tcp --dport 8080 -j ACCEPT"
    reject = "iptables -w -A PANDO-X-1 -p tcp -j REJECT --reject-with tcp-reset"
    assert lines.index(accept) < lines.index(reject)  # accepts before the reject
    assert "-I OUTPUT -d 10.231.4.0/24 -j PANDO-X-1" in script
    assert "-I DOCKER-USER -i pando-e1 -d 10.231.4.0/24 -j PANDO-X-1" in script
    sealed = private_script("PANDO-X-1", "10.231.4.0/24", "pando-e1", ())
    assert "ACCEPT" not in sealed.replace("ESTABLISHED,RELATED -j ACCEPT", "")
