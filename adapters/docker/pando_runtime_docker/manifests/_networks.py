"""A bundle's network: its create request and a subnet carved from the adapter's pool."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from ._labels import Naming

__all__ = ["TRUSTED_INTERFACES", "free_subnet", "network_request"]

TRUSTED_INTERFACES = "com.docker.network.bridge.trusted_host_interfaces"
"""The bridge option (Docker 28.2+) naming interfaces whose packets may reach the network's
containers by address; from 28.2 every other interface's are dropped in the raw table, before
``DOCKER-USER``. Older engines ignore it."""


def free_subnet(pool: str, prefix: int, taken: Iterable[str]) -> str | None:
    """The first ``/prefix`` of ``pool`` that overlaps none of ``taken`` (``None``: full)."""
    network = ipaddress.ip_network(pool, strict=False)
    used = []
    for text in taken:
        try:
            used.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            continue
    for candidate in network.subnets(new_prefix=prefix):
        if not any(candidate.overlaps(other) for other in used):
            return str(candidate)
    return None


def network_request(
    naming: Naming,
    bundle_id: str,
    subnet: str,
    *,
    internal: bool = False,
    trusted_bridges: tuple[str, ...] = (),
) -> dict[str, Any]:
    """``POST /networks/create`` for the bundle's bridge network.

    ``internal``: no route out (restricted egress); ``trusted_bridges``: bridges routed to the
    bundle's containers by address (the edge network's, under private networks), which the
    engine must not drop (:data:`TRUSTED_INTERFACES`).
    """
    options = {TRUSTED_INTERFACES: ":".join(trusted_bridges)} if trusted_bridges else {}
    return {
        "Name": naming.network_name(bundle_id),
        "CheckDuplicate": True,
        "Driver": "bridge",
        "Internal": internal,
        "Attachable": False,
        "Labels": naming.bundle_labels(bundle_id),
        "IPAM": {"Driver": "default", "Config": [{"Subnet": subnet}]},
        "Options": options,
    }
