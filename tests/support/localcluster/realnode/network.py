"""The real nodes' network: two namespaces, joined to each other and to nothing else.

::

    node namespace ("<prefix>node")          outside namespace ("<prefix>out")
    ------------------------------------     ------------------------------------
    lo        127.0.0.1 (relays to the host)  eth0   198.19.0.1/24
    eth0      198.19.0.2/24  <-- veth -->     lo     203.0.113.10, .20   (the stand-in internet)
    cni0      198.18.0.1/24 (pods, made by          169.254.169.254      (the metadata stand-in)
              the CNI bridge plugin)                198.19.1.1           (the API server, for pods)

The node namespace holds kubelet, containerd, kube-proxy, kube-router and every pod; the
outside namespace stands for what lies beyond a node: the internet, a cloud's metadata service,
the API server's address. Neither has a default route: the node routes the stand-ins to the
outside namespace, which routes the pod range back; any other destination is unreachable. Every
address is in a range reserved for documentation or benchmarks (RFC 5737, RFC 2544) or
link-local, so nothing here could be mistaken for a real host even if it escaped, and nothing
can escape: no interface of either namespace is joined to the host's.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import netns

POD_CIDR = "198.18.0.0/24"
POD_GATEWAY = "198.18.0.1"
LINK_CIDR = "198.19.0.0/24"
NODE_IP = "198.19.0.2"
OUTSIDE_IP = "198.19.0.1"
API_SERVER_IP = "198.19.1.1"
"""Where pods reach the API server (the ``kubernetes`` Service's endpoint)."""
INTERNET_IPS = ("203.0.113.10", "203.0.113.20")
"""The stand-in internet: two hosts, so a test can allow one and see the other refused."""
INTERNET_CIDR = "203.0.113.0/24"
METADATA_IP = "169.254.169.254"


@dataclass(frozen=True)
class NodeNetwork:
    """The two namespaces of one set of real nodes, by name."""

    node: str
    outside: str

    @classmethod
    def named(cls, prefix: str) -> NodeNetwork:
        """The namespaces ``<prefix>node`` and ``<prefix>out``."""
        return cls(node=f"{prefix}node", outside=f"{prefix}out")

    def create(self) -> None:
        """Make both namespaces, their link, the stand-ins and the routes."""
        netns.add(self.node)
        netns.add(self.outside)
        netns.ip("link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns",
                 self.outside, netns=self.node)  # fmt: skip
        netns.ip("addr", "add", f"{NODE_IP}/24", "dev", "eth0", netns=self.node)
        netns.ip("addr", "add", f"{OUTSIDE_IP}/24", "dev", "eth0", netns=self.outside)
        # The stand-ins sit on the outside namespace's loopback: local to it, reachable only
        # through its link to the node (this kernel has no dummy interfaces).
        for address in (*INTERNET_IPS, METADATA_IP, API_SERVER_IP):
            netns.ip("addr", "add", f"{address}/32", "dev", "lo", netns=self.outside)
        for space in (self.node, self.outside):
            netns.ip("link", "set", "eth0", "up", netns=space)
        for destination in (INTERNET_CIDR, f"{METADATA_IP}/32", f"{API_SERVER_IP}/32"):
            netns.ip("route", "add", destination, "via", OUTSIDE_IP, netns=self.node)
        netns.ip("route", "add", POD_CIDR, "via", NODE_IP, netns=self.outside)
        # Pods' traffic is routed by the node namespace (as a node routes its pods'), and
        # bridged traffic passes iptables there, where kube-proxy and kube-router filter it.
        netns.sysctl(self.node, "net.ipv4.ip_forward", "1")
        netns.sysctl(self.node, "net.bridge.bridge-nf-call-iptables", "1")
        netns.sysctl(self.outside, "net.ipv4.ip_forward", "0")

    def delete(self) -> None:
        """Remove both namespaces and every process still in them."""
        for space in (self.node, self.outside):
            netns.delete(space)
