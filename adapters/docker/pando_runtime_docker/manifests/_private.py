"""Private networks: only exposed ports of a bundle are reachable from its outside.

Run by the egress guard's helper (the daemon's network namespace, ``NET_ADMIN``), one chain
per bundle, ``PANDO-X-<digest>``, jumped to for traffic to the bundle's subnet from two
places: ``OUTPUT`` (the daemon's own namespace, where the host's proxy runs in ``address``
mode) and ``DOCKER-USER`` for packets coming in from the edge network's bridge (edges are
routed to bundles through the daemon's namespace, never joined to their networks). The
chain accepts replies, then each exposed workload's address on each of its ports (protocol
included), and rejects the rest. Traffic within a bundle never passes it (it stays on the
bundle's bridge, coming from no edge and not from the daemon). Pure: no I/O here.
"""

from __future__ import annotations

import hashlib
import ipaddress
import shlex

import attrs

__all__ = [
    "EDGE_BRIDGE_PREFIX",
    "Allowed",
    "edge_bridge",
    "private_chain",
    "private_script",
    "release_script",
]

PRIVATE_CHAIN_PREFIX = "PANDO-X-"
EDGE_BRIDGE_PREFIX = "pando-e"


@attrs.frozen(order=True)
class Allowed:
    """One address, port and protocol that the outside of a bundle may open."""

    address: str
    port: int
    protocol: str = "tcp"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def private_chain(owner: str, bundle_id: str) -> str:
    """The chain of one bundle (at most 28 characters, iptables' limit)."""
    return PRIVATE_CHAIN_PREFIX + _digest(owner, bundle_id)[:16]


def edge_bridge(owner: str) -> str:
    """The Linux bridge of the owner's edge network (at most 15 characters)."""
    return EDGE_BRIDGE_PREFIX + _digest(owner)[:8]


def private_script(chain: str, subnet: str, bridge: str, allowed: tuple[Allowed, ...]) -> str:
    """A shell script that (re)writes a bundle's chain and its two jumps.

    Idempotent: the chain is flushed and filled again, each jump added when absent. Jumps of
    other chains for the same subnet (a destroyed bundle's, whose subnet was carved again)
    are deleted first, so a stale chain never rejects what this one allows.
    """
    network = str(ipaddress.ip_network(subnet, strict=False))
    chain_q, subnet_q, bridge_q = shlex.quote(chain), shlex.quote(network), shlex.quote(bridge)
    lines = [
        "set -e",
        f"iptables -w -N {chain_q} 2>/dev/null || true",
        f"iptables -w -F {chain_q}",
        f"iptables -w -A {chain_q} -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
    ]
    for rule in sorted(set(allowed)):
        address = shlex.quote(str(ipaddress.ip_address(rule.address)))
        proto = shlex.quote(rule.protocol)
        lines.append(
            f"iptables -w -A {chain_q} -d {address} -p {proto} --dport {int(rule.port)} -j ACCEPT"
        )
    lines += [
        f"iptables -w -A {chain_q} -p tcp -j REJECT --reject-with tcp-reset",
        f"iptables -w -A {chain_q} -j REJECT --reject-with icmp-port-unreachable",
    ]
    stale = f"-d {network} .*-j {PRIVATE_CHAIN_PREFIX}"
    for parent, match in (("OUTPUT", ""), ("DOCKER-USER", f"-i {bridge_q} ")):
        unstale = (
            f"iptables -w -S {parent} | grep -e {shlex.quote(stale)} "
            f"| grep -v -e {chain_q} | sed 's/^-A/-D/' "
            "| while read -r rule; do eval iptables -w $rule; done"
        )
        jump = f"{parent} {match}-d {subnet_q} -j {chain_q}"
        lines += [unstale, f"iptables -w -C {jump} 2>/dev/null || iptables -w -I {jump}"]
    # Replies to the edges pass Docker's isolation (and the guard's private-range rules).
    reply = f"DOCKER-USER -o {bridge_q} -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT"
    lines.append(f"iptables -w -D {reply} 2>/dev/null || true")
    lines.append(f"iptables -w -I {reply}")
    return "\n".join(lines) + "\n"


def release_script(chain: str) -> str:
    """A shell script that removes a bundle's chain and every jump to it (idempotent)."""
    chain_q = shlex.quote(chain)
    lines = [
        f"iptables -w -S {parent} | grep -e {shlex.quote(f'-j {chain}$')} | sed 's/^-A/-D/' "
        "| while read -r rule; do eval iptables -w $rule; done"
        for parent in ("OUTPUT", "DOCKER-USER")
    ]
    lines += [
        f"iptables -w -F {chain_q} 2>/dev/null || true",
        f"iptables -w -X {chain_q} 2>/dev/null || true",
    ]
    return "\n".join(lines) + "\n"
