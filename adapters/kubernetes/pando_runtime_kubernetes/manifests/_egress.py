"""Egress: what an app's pods may reach, as NetworkPolicies, and the ranges they never reach.

Every app (and trial) namespace's policy (``pando-default``) restricts egress as well as
ingress. Unrestricted, its pods may reach their own namespace, the cluster's DNS (port 53,
UDP and TCP) and the internet: ``0.0.0.0/0`` and ``::/0`` except the cluster's ranges. Those
are the ``pod_cidr``, ``service_cidr``, ``api_server_cidr`` and ``node_cidr`` settings; while
the pod and service ranges are not both set, every private, shared and link-local range is
excluded instead (:data:`PRIVATE_RANGES`), so an
unconfigured adapter errs on the side of reaching less. The cloud metadata address is
excluded always.

Restricted (``BundlePlan.network.egress``), app pods may reach their namespace, DNS and the
plan's CIDR rules; host-name rules go through the namespace's egress gateway (see
``_gateway``), the one pod that a second policy lets reach the internet, on the rules' ports
only. One policy for ingress and egress, not two: a namespace's first apply costs one write
less, and policies add up, so the gateway's own policy only widens what the gateway reaches.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from pando_runtime import EgressPolicy, EgressRule, Problem

from .._names import LABEL_ROLE, ROLE_EGRESS_GATEWAY

__all__ = [
    "GATEWAY_POLICY",
    "METADATA_ADDRESSES",
    "PRIVATE_RANGES",
    "ClusterRanges",
    "DnsPeer",
    "egress_rules",
    "gateway_policy",
    "host_rules",
    "rule_problems",
]

GATEWAY_POLICY = "pando-egress-gateway"

PRIVATE_RANGES = (
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "fc00::/7",
    "fe80::/10",
)
"""Private (RFC 1918, unique local), shared (RFC 6598) and link-local ranges."""
METADATA_ADDRESSES = ("169.254.169.254/32", "fd00:ec2::254/128")
"""The cloud metadata service (IPv4, and IPv6 where the cloud offers it): never reachable."""

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _networks(values: Iterable[str]) -> list[Network]:
    return [ipaddress.ip_network(v.strip(), strict=False) for v in values if v.strip()]


def _collapse(networks: Iterable[Network]) -> tuple[str, ...]:
    """The smallest list covering ``networks``: IPv4 first, each family in address order."""
    v4 = [n for n in networks if isinstance(n, ipaddress.IPv4Network)]
    v6 = [n for n in networks if isinstance(n, ipaddress.IPv6Network)]
    collapsed = [*ipaddress.collapse_addresses(v4), *ipaddress.collapse_addresses(v6)]
    return tuple(str(n) for n in collapsed)


def _list(setting: str | None) -> list[str]:
    return [part for part in (setting or "").split(",") if part.strip()]


@attrs.frozen
class ClusterRanges:
    """The ranges app pods never reach outside their namespace (``excluded``, collapsed).

    ``configured``: the pod and service ranges were set; otherwise every private,
    shared and link-local range stands in for them.
    """

    excluded: tuple[str, ...]
    configured: bool
    forbidden: tuple[str, ...] = ()
    """The node and API server ranges (``node_cidr``, ``api_server_cidr``): no plan's rule may
    open them (an app never reaches a node's kubelet or the control plane directly)."""

    @classmethod
    def from_settings(
        cls,
        pod_cidr: str | None,
        service_cidr: str | None,
        api_server_cidr: str | None,
        node_cidr: str | None = None,
    ) -> ClusterRanges:
        """The ranges from comma-separated settings (dual-stack clusters name two each).

        Raises ``ValueError`` for a value that is not a CIDR block.
        """
        given = _networks(
            [*_list(pod_cidr), *_list(service_cidr), *_list(api_server_cidr), *_list(node_cidr)]
        )
        known = bool(_list(pod_cidr)) and bool(_list(service_cidr))
        base = given if known else [*_networks(PRIVATE_RANGES), *given]
        forbidden = _collapse(_networks([*_list(api_server_cidr), *_list(node_cidr)]))
        return cls(_collapse([*base, *_networks(METADATA_ADDRESSES)]), known, forbidden)

    def family(self, version: int) -> list[str]:
        """The excluded ranges of IPv4 (4) or IPv6 (6)."""
        return [r for r in self.excluded if ipaddress.ip_network(r).version == version]

    def inside(self, cidr: str) -> list[str]:
        """The excluded ranges strictly inside ``cidr`` (what a rule for it must except)."""
        outer = ipaddress.ip_network(cidr, strict=False)
        found = []
        for text in self.excluded:
            inner = ipaddress.ip_network(text)
            if inner.version == outer.version and inner != outer and inner.subnet_of(outer):  # type: ignore[arg-type]
                found.append(text)
        return found

    def details(self) -> dict[str, str]:
        """What the health check says about the ranges in effect."""
        source = (
            "the pod_cidr, service_cidr, api_server_cidr and node_cidr settings"
            if self.configured
            else "every private, shared and link-local range (pod_cidr and service_cidr unset)"
        )
        return {
            "egress_excluded": ",".join(self.excluded),
            "egress_excluded_from": source,
        }


@attrs.frozen
class DnsPeer:
    """Where app pods resolve names: the cluster DNS pods (namespace and labels)."""

    namespace: str
    labels: Mapping[str, str]

    def rule(self) -> dict[str, Any]:
        """An egress rule to the DNS pods on port 53, UDP and TCP."""
        return {
            "to": [
                {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": self.namespace}
                    },
                    "podSelector": {"matchLabels": dict(self.labels)},
                }
            ],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        }


def host_rules(egress: EgressPolicy | None) -> tuple[EgressRule, ...]:
    """The host-name rules of ``egress`` (what the gateway serves)."""
    return tuple(r for r in egress.allow if not r.is_cidr) if egress is not None else ()


def rule_problems(
    egress: EgressPolicy | None, path: str, forbidden: Sequence[str] = ()
) -> list[Problem]:
    """Each CIDR rule inside a range no app reaches, whatever its plan asks, by its path.

    Those are the metadata address and the ``forbidden`` ranges (the nodes' and the API
    server's). A rule that only contains such a range is taken: the range is excepted from it.
    """
    if egress is None:
        return []
    never = [
        (network, "the cloud metadata address") for network in _networks(METADATA_ADDRESSES)
    ] + [
        (network, f"in {network}, the nodes' or the API server's range")
        for network in _networks(forbidden)
    ]
    problems = []
    for i, rule in enumerate(egress.allow):
        if not rule.is_cidr:
            continue
        network = ipaddress.ip_network(rule.destination, strict=False)
        for blocked, what in never:
            if network.version == blocked.version and network.subnet_of(blocked):  # type: ignore[arg-type]
                problems.append(
                    Problem(
                        f"{path}.allow[{i}].destination",
                        f"{rule.destination} is {what}, which apps never reach",
                        "forbidden_destination",
                    )
                )
                break
    return problems


def _internet(ranges: ClusterRanges) -> list[dict[str, Any]]:
    """Peers for the whole internet, both families, except the cluster's ranges."""
    peers = []
    for cidr, version in (("0.0.0.0/0", 4), ("::/0", 6)):
        block: dict[str, Any] = {"cidr": cidr}
        excluded = ranges.family(version)
        if excluded:
            block["except"] = excluded
        peers.append({"ipBlock": block})
    return peers


def _cidr_rule(rule: EgressRule, ranges: ClusterRanges) -> dict[str, Any]:
    """A CIDR rule: TCP and UDP to its block (never the cluster's ranges strictly inside it)."""
    block: dict[str, Any] = {"cidr": rule.destination}
    inside = ranges.inside(rule.destination)
    if inside:
        block["except"] = inside
    out: dict[str, Any] = {"to": [{"ipBlock": block}]}
    if rule.ports:
        out["ports"] = [
            {"protocol": protocol, "port": port}
            for port in sorted(set(rule.ports))
            for protocol in ("TCP", "UDP")
        ]
    return out


def _gateway_ports(rules: Sequence[EgressRule]) -> list[dict[str, Any]] | None:
    """The gateway's outbound ports: the host rules' ports, or ``None`` (every port)."""
    if any(not r.ports for r in rules):
        return None
    return [{"protocol": "TCP", "port": p} for p in sorted({p for r in rules for p in r.ports})]


def egress_rules(
    egress: EgressPolicy | None, ranges: ClusterRanges, dns: DnsPeer
) -> list[dict[str, Any]]:
    """The egress rules of every pod of an app (or trial) namespace.

    Their own namespace (the gateway among it) and DNS always; then the internet except
    the cluster's ranges when unrestricted, else the plan's CIDR rules alone.
    """
    rules: list[dict[str, Any]] = [{"to": [{"podSelector": {}}]}, dns.rule()]
    if egress is None:
        rules.append({"to": _internet(ranges)})
    else:
        rules += [_cidr_rule(r, ranges) for r in egress.allow if r.is_cidr]
    return rules


def gateway_policy(
    ns: str,
    labels: Mapping[str, str],
    egress: EgressPolicy | None,
    ranges: ClusterRanges,
    dns: DnsPeer,
) -> dict[str, Any] | None:
    """The gateway's own policy; ``None`` when no rule names a host.

    Beside its namespace's rules, the gateway reaches the internet on the host rules' ports
    (never the cluster's ranges). Policies add up: this one selects the gateway alone, so
    only it reaches out; it admits the pods of its own namespace.
    """
    hosts = host_rules(egress)
    if not hosts:
        return None
    outbound: dict[str, Any] = {"to": _internet(ranges)}
    ports = _gateway_ports(hosts)
    if ports is not None:
        outbound["ports"] = ports
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": GATEWAY_POLICY, "namespace": ns, "labels": dict(labels)},
        "spec": {
            "podSelector": {"matchLabels": {LABEL_ROLE: ROLE_EGRESS_GATEWAY}},
            "policyTypes": ["Ingress", "Egress"],
            # Its own namespace's pods may use it (a trial's namespace admits nothing else).
            "ingress": [{"from": [{"podSelector": {}}]}],
            "egress": [dns.rule(), outbound],
        },
    }
