"""Restricted egress: the bundle's gateway (Squid), its outbound network and the proxy env.

A bundle whose plan restricts egress runs on an ``internal`` network: no route out, raw TCP
and UDP reach nothing beyond the bundle. When its plan allows anything, a gateway container
joins that network (alias :data:`GATEWAY_ALIAS`) and an outbound bridge of its own, and the
workloads get ``HTTP_PROXY``/``HTTPS_PROXY`` naming it. The gateway passes exactly the plan's
rules: host names (matched before any lookup, so an unlisted name is never resolved) and
CIDR blocks (address literals), each on its ports; a listed name whose address falls in a
private, shared or link-local range is refused after the lookup, unless a CIDR rule names
that address. Squid, as the Kubernetes adapter's gateway: Debian packages it, it matches
CONNECT tunnels and plain requests alike, and its whole configuration is one file, carried
into the container before it starts. Pure: no I/O here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from pando_runtime import CarriedFile, EgressPolicy, EgressRule
from pando_runtime.plugin import squid_config as _squid_config

from ._egress import BLOCKED_RANGES
from ._labels import Naming

__all__ = [
    "GATEWAY_ALIAS",
    "GATEWAY_PORT",
    "UNROUTED_RESOLVER",
    "GatewayNames",
    "config_digest",
    "gateway_files",
    "gateway_request",
    "outbound_network_request",
    "proxy_env",
    "squid_config",
]

GATEWAY_ALIAS = "egress.gateway"
"""The gateway's name on the bundle network (a dot: no workload name can take it)."""
GATEWAY_PORT = 3128
CONFIG_PATH = "/etc/pando-gateway/squid.conf"
UNROUTED_RESOLVER = "192.0.2.53"
"""The upstream resolver of a restricted bundle's workloads: an address reserved for
documentation (RFC 5737), never routed and never on loopback. Docker's embedded DNS still
answers the bundle's own names; an outside name is forwarded here from the container's
namespace, where an internal network has no route, so it goes nowhere. Without it, Docker
Engines before 23.0.11, 25.0.5 and 26.0 forward an internal network's lookups from the
daemon's namespace whenever the daemon's resolver is on loopback (CVE-2024-29018)."""


class GatewayNames:
    """Names and labels of one bundle's gateway objects.

    Apart from the owner's bundle labels, so the adapter's view of workloads never lists them.
    """

    def __init__(self, naming: Naming, bundle_id: str) -> None:
        self.bundle_id = bundle_id
        self.container = f"{naming.owner}.{bundle_id}.egress.gateway"
        self.network = f"{naming.owner}.{bundle_id}.egress"
        self.owner_key = f"{naming.prefix}.egress-owner"
        self.bundle_key = f"{naming.prefix}.egress-bundle"
        self.digest_key = f"{naming.prefix}.egress-digest"
        self.labels = {self.owner_key: naming.owner, self.bundle_key: bundle_id}


def squid_config(rules: Sequence[EgressRule], blocked: Sequence[str] = BLOCKED_RANGES) -> str:
    """``squid.conf`` passing exactly ``rules`` (the core's ``plugin.squid_config``).

    Host names, and CIDR blocks as address literals: the bundle's network has no route, so
    every rule goes through the gateway. A listed name resolving into ``blocked`` is refused.
    """
    return _squid_config(rules, listen=str(GATEWAY_PORT), refused=blocked)


def config_digest(image: str, config: str) -> str:
    """What the gateway container carries of what it runs: a changed one is replaced."""
    return hashlib.sha256(f"{image}\0{config}".encode()).hexdigest()[:32]


def proxy_env(egress: EgressPolicy | None, workloads: Sequence[str]) -> dict[str, str]:
    """The workloads' proxy variables (both spellings); empty when no gateway runs."""
    if egress is None or not egress.allow:
        return {}
    url = f"http://{GATEWAY_ALIAS}:{GATEWAY_PORT}"
    no_proxy = ",".join(["localhost", "127.0.0.1", "::1", *sorted(workloads)])
    env = {"HTTP_PROXY": url, "HTTPS_PROXY": url, "NO_PROXY": no_proxy}
    return {**env, **{k.lower(): v for k, v in env.items()}}


def outbound_network_request(names: GatewayNames, subnet: str) -> dict[str, Any]:
    """``POST /networks/create`` for the gateway's own bridge (its only way out)."""
    return {
        "Name": names.network,
        "CheckDuplicate": True,
        "Driver": "bridge",
        "Internal": False,
        "Attachable": False,
        "Labels": dict(names.labels),
        "IPAM": {"Driver": "default", "Config": [{"Subnet": subnet}]},
    }


def gateway_request(
    names: GatewayNames, image: str, digest: str, *, stop_timeout: int
) -> dict[str, Any]:
    """``POST /containers/create`` for the gateway, on its outbound network.

    The bundle network is joined before start, with :data:`GATEWAY_ALIAS`.
    """
    return {
        "Image": image,
        "Cmd": ["squid", "-N", "-f", CONFIG_PATH],
        "Labels": {**names.labels, names.digest_key: digest},
        "StopTimeout": stop_timeout,
        "ExposedPorts": {f"{GATEWAY_PORT}/tcp": {}},
        "HostConfig": {
            "NetworkMode": names.network,
            "RestartPolicy": {"Name": "no"},
            "Memory": 256 * 1024**2,
            "MemorySwap": 256 * 1024**2,
            "NanoCpus": 500_000_000,
            "LogConfig": {"Type": "json-file", "Config": {"max-size": "1048576", "max-file": "2"}},
        },
    }


def gateway_files(config: str) -> tuple[CarriedFile, ...]:
    """The configuration, carried in before the gateway starts."""
    return (CarriedFile(CONFIG_PATH, config.encode(), mode=0o644),)
