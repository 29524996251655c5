"""A bundle's network: its create request and a subnet carved from the adapter's pool."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from ._labels import Naming

__all__ = ["free_subnet", "network_request"]


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
    naming: Naming, bundle_id: str, subnet: str, *, internal: bool = False
) -> dict[str, Any]:
    """``POST /networks/create`` for the bundle's bridge network.

    ``internal``: no route out (restricted egress).
    """
    return {
        "Name": naming.network_name(bundle_id),
        "CheckDuplicate": True,
        "Driver": "bridge",
        "Internal": internal,
        "Attachable": False,
        "Labels": naming.bundle_labels(bundle_id),
        "IPAM": {"Driver": "default", "Config": [{"Subnet": subnet}]},
    }
