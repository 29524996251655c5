"""Default egress: the rules that keep bundle networks off private ranges, and their helper.

The adapter speaks only the Engine API, so it cannot write the host's firewall itself. What
it can do is run a short-lived container in the daemon's network namespace
(``NetworkMode: host``, ``CAP_NET_ADMIN``) from an image with ``iptables`` (the
``egress_guard_image`` setting): that container fills a chain of the adapter's own and jumps
to it from ``DOCKER-USER``, the chain Docker keeps for its users' rules and runs before its
own forwarding rules. Traffic from the ``subnet_pool`` to private, shared and link-local
ranges (the cloud metadata address among them) is rejected; traffic between addresses of the
pool returns to Docker's own chains, whose isolation rules keep one bundle's bridge from
another's. Pure: no I/O here.
"""

from __future__ import annotations

import hashlib
import ipaddress
import shlex
from typing import Any

from ._labels import Naming

__all__ = [
    "BLOCKED_RANGES",
    "FIREWALL_CHECK",
    "GUARD_CHAIN_PREFIX",
    "HOST_CHAIN_PREFIX",
    "NO_DOCKER_USER",
    "guard_chain",
    "guard_request",
    "guard_script",
    "host_chain",
]

BLOCKED_RANGES = (
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "169.254.0.0/16",
)
"""Private (RFC 1918), shared (RFC 6598) and link-local ranges (169.254.169.254 included)."""

GUARD_CHAIN_PREFIX = "PANDO-EGRESS-"
NO_DOCKER_USER = 3
"""The guard's exit code when no iptables of its image finds ``DOCKER-USER``: the daemon
writes no iptables rules (``dockerd --iptables=false``, or the nftables firewall backend)."""

FIREWALL_CHECK = f"""\
if ! iptables -w -n -L DOCKER-USER >/dev/null 2>&1; then
  for other in iptables-nft iptables-legacy; do
    if command -v "$other" >/dev/null 2>&1 && "$other" -w -n -L DOCKER-USER >/dev/null 2>&1; then
      echo "DOCKER-USER is in $other's tables, not in those of this image's iptables" >&2
      exit 1
    fi
  done
  echo "no DOCKER-USER chain: the daemon writes no iptables rules" >&2
  exit {NO_DOCKER_USER}
fi
"""
"""Shell that stops before any rule is written unless ``DOCKER-USER`` is there to jump from.

Another iptables of the image seeing the chain is a backend mismatch (exit 1, the guard's
usual failure); none seeing it is an engine that manages no iptables firewall."""
HOST_CHAIN_PREFIX = "PANDO-HOST-"


def _digest(owner: str, pool: str) -> str:
    return hashlib.sha256(f"{owner}\0{pool}".encode()).hexdigest()[:12]


def guard_chain(owner: str, pool: str) -> str:
    """The forwarding chain of one owner's pool (at most 28 characters: a digest names it)."""
    return GUARD_CHAIN_PREFIX + _digest(owner, pool)


def host_chain(owner: str, pool: str) -> str:
    """The chain that keeps one owner's pool off the daemon's own namespace.

    That is its bridge gateways' addresses and whatever listens there.
    """
    return HOST_CHAIN_PREFIX + _digest(owner, pool)


def guard_script(
    chain: str, pool: str, blocked: tuple[str, ...] = BLOCKED_RANGES, *, host: str | None = None
) -> str:
    """A shell script that (re)writes ``chain`` and jumps to it from ``DOCKER-USER`` once.

    With ``host`` (a chain name), also keeps the pool from opening connections to the
    daemon's own namespace: ``INPUT`` jumps to ``host``, which lets replies through (the
    host dialing a workload: ``upstream``) and rejects the rest. Idempotent: each chain is
    flushed and filled again, each jump added only when absent, so two adapters (or two
    applies) running it leave one copy. ``REJECT`` rather than ``DROP``: a blocked
    connection fails at once instead of hanging until the client's timeout.
    """
    network = str(ipaddress.ip_network(pool, strict=False))
    chain_q, pool_q = shlex.quote(chain), shlex.quote(network)
    lines = [
        "set -e",
        FIREWALL_CHECK.rstrip("\n"),
        f"iptables -w -N {chain_q} 2>/dev/null || true",
        f"iptables -w -F {chain_q}",
        f"iptables -w -A {chain_q} -d {pool_q} -j RETURN",
        *_dns_returns(chain_q),
    ]
    for cidr in blocked:
        target = shlex.quote(str(ipaddress.ip_network(cidr, strict=False)))
        lines.append(
            f"iptables -w -A {chain_q} -d {target} -j REJECT --reject-with icmp-net-prohibited"
        )
    jump = f"DOCKER-USER -s {pool_q} -j {chain_q}"
    lines.append(f"iptables -w -C {jump} 2>/dev/null || iptables -w -I {jump}")
    if host is not None:
        host_q = shlex.quote(host)
        lines += [
            f"iptables -w -N {host_q} 2>/dev/null || true",
            f"iptables -w -F {host_q}",
            f"iptables -w -A {host_q} -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN",
            *_dns_returns(host_q),
            f"iptables -w -A {host_q} -j REJECT --reject-with icmp-host-prohibited",
        ]
        jump = f"INPUT -s {pool_q} -j {host_q}"
        lines.append(f"iptables -w -C {jump} 2>/dev/null || iptables -w -I {jump}")
    return "\n".join(lines) + "\n"


def _dns_returns(chain: str) -> list[str]:
    """DNS (port 53) stays open to every address.

    The daemon's resolver is often in a blocked range (a cloud's VPC resolver,
    169.254.169.254 on some clouds, a resolver on the host itself), and the containers'
    lookups are forwarded to it.
    """
    return [f"iptables -w -A {chain} -p {proto} --dport 53 -j RETURN" for proto in ("udp", "tcp")]


def guard_request(naming: Naming, image: str, script: str) -> dict[str, Any]:
    """``POST /containers/create`` for the helper that runs ``script`` on the daemon's network.

    It carries a label of its own role, not the owner's bundle labels: the adapter's view of
    bundles never lists it.
    """
    return {
        "Image": image,
        "Entrypoint": ["sh", "-c"],
        "Cmd": [script],
        "Labels": {f"{naming.prefix}.egress-guard": naming.owner},
        "NetworkDisabled": False,
        "HostConfig": {
            "NetworkMode": "host",
            "CapAdd": ["NET_ADMIN", "NET_RAW"],
            "RestartPolicy": {"Name": "no"},
            "LogConfig": {"Type": "json-file", "Config": {"max-size": "65536"}},
        },
    }
