"""An engine's network: two namespaces, joined to each other and to nothing else.

::

    engine namespace ("<prefix>d<slot>")         outside namespace ("<prefix>o<slot>")
    ----------------------------------------     ----------------------------------------
    lo        127.0.0.1                          eth0   198.19.<64+slot>.1/24
    eth0      198.19.<64+slot>.2/24  <- veth ->  lo     203.0.113.10, .20  (the stand-in internet)
    docker0   198.18.<128+16*slot>.1/24                 203.0.113.53       (the stand-in DNS)
    user networks from 198.18.<136+16*slot>.0/21        169.254.169.254    (the metadata stand-in)
                                                        10.255.0.10        (a private-range host)

dockerd and its containers live in the engine namespace; the outside namespace stands for
what lies beyond a host. Neither has a default route: the engine namespace routes the
stand-ins to the outside one (containers reach them through Docker's NAT), anything else is
unreachable. The real node's harness uses 198.18.0.0/24 and 198.19.0.0/24 (and 198.19.1.1):
the ranges here start above them. Each engine of a process has a slot of its own (its own
namespaces, bridge and pool), so two engines run side by side.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from localcluster.realnode import netns
from localcluster.realnode.addons import STANDIN_HOSTS

INTERNET_IPS = ("203.0.113.10", "203.0.113.20")
"""The stand-in internet: two hosts, so a test can allow one and see the other refused."""
INTERNET_CIDR = "203.0.113.0/24"
DNS_IP = "203.0.113.53"
"""The containers' nameserver: the stand-in DNS server (:mod:`.dns`), which answers the
stand-in names, NXDOMAIN to any other, and logs every question."""
METADATA_IP = "169.254.169.254"
PRIVATE_IP = "10.255.0.10"
"""A host in a private range, outside the engine (what an egress policy keeps apps from)."""
NAMES = {
    **STANDIN_HOSTS,
    "metadata.pando.test": METADATA_IP,
    "private.pando.test": PRIVATE_IP,
}
"""Names the stand-in DNS server answers (the real node's stand-in names, and two more)."""
HTTP_PORT = 80
"""Every stand-in answers HTTP on this port (see :mod:`.outside`)."""
MAX_SLOTS = 8
"""Engines one process can run at once."""


@dataclass(frozen=True)
class Outside:
    """The stand-in addresses beyond an engine, each answering HTTP on :data:`HTTP_PORT`."""

    internet: tuple[str, ...] = INTERNET_IPS
    metadata: str = METADATA_IP
    private: str = PRIVATE_IP
    dns: str = DNS_IP
    http_port: int = HTTP_PORT
    names: Mapping[str, str] = field(default_factory=lambda: dict(NAMES))
    """What the DNS server at :attr:`dns` answers; every other name is NXDOMAIN."""

    @property
    def addresses(self) -> tuple[str, ...]:
        """Every address that answers: the internet's, the metadata's, the private host's."""
        return (*self.internet, self.metadata, self.private)


@dataclass(frozen=True)
class EngineNetwork:
    """The namespaces and address ranges of one engine, by prefix and slot."""

    prefix: str
    slot: int

    def __post_init__(self) -> None:
        if not 0 <= self.slot < MAX_SLOTS:
            raise ValueError(f"engine slot {self.slot} outside 0..{MAX_SLOTS - 1}")

    @property
    def engine(self) -> str:
        """The namespace dockerd and its containers run in."""
        return f"{self.prefix}d{self.slot}"

    @property
    def outside(self) -> str:
        """The namespace of the stand-in outside world."""
        return f"{self.prefix}o{self.slot}"

    @property
    def bip(self) -> str:
        """``docker0``'s address and prefix (dockerd's ``--bip``)."""
        return f"198.18.{128 + 16 * self.slot}.1/24"

    @property
    def address_pool(self) -> str:
        """``--default-address-pool``: /26 networks from a /21 (32 user networks)."""
        return f"base=198.18.{136 + 16 * self.slot}.0/21,size=26"

    @property
    def link_cidr(self) -> str:
        """The veth's subnet between the engine and the outside."""
        return f"198.19.{64 + self.slot}.0/24"

    @property
    def engine_ip(self) -> str:
        """The engine namespace's end of the link."""
        return f"198.19.{64 + self.slot}.2"

    @property
    def outside_ip(self) -> str:
        """The outside namespace's end of the link."""
        return f"198.19.{64 + self.slot}.1"

    def create(self, outside: Outside) -> None:
        """Make both namespaces, the link, the stand-in addresses and the routes."""
        netns.add(self.engine)
        netns.add(self.outside)
        netns.ip("link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns",
                 self.outside, netns=self.engine)  # fmt: skip
        netns.ip("addr", "add", f"{self.engine_ip}/24", "dev", "eth0", netns=self.engine)
        netns.ip("addr", "add", f"{self.outside_ip}/24", "dev", "eth0", netns=self.outside)
        # On the outside namespace's loopback: local to it, reachable only through the link
        # (this kernel has no dummy interfaces).
        stand_ins = (*outside.addresses, outside.dns)
        for address in stand_ins:
            netns.ip("addr", "add", f"{address}/32", "dev", "lo", netns=self.outside)
        for space in (self.engine, self.outside):
            netns.ip("link", "set", "eth0", "up", netns=space)
        for address in stand_ins:
            netns.ip("route", "add", f"{address}/32", "via", self.outside_ip, netns=self.engine)
        # The outside routes nothing on (containers reach it through Docker's NAT, from the
        # link's address, so it needs no route back either).
        netns.sysctl(self.outside, "net.ipv4.ip_forward", "0")

    def delete(self) -> None:
        """Remove both namespaces and every process still in them."""
        for space in (self.engine, self.outside):
            netns.delete(space)

    def exists(self) -> bool:
        """Whether either namespace is still there."""
        return netns.exists(self.engine) or netns.exists(self.outside)
