"""The real nodes' network: a namespace per node and one outside namespace, joined to each
other and to nothing else.

::

    node namespace i ("<prefix>node<i>")     outside namespace ("<prefix>out")
    ------------------------------------     ------------------------------------
    lo     127.0.0.1 (relays to the host)     br0    198.19.0.1/24, a bridge of n0, n1...
    eth0   198.19.0.<2+i>/24  <-- veth -->    n<i>   (a port of br0)
    cni0   198.18.<i>.1/24 (pods, made by     lo     203.0.113.10, .20   (the stand-in internet)
           the CNI bridge plugin)                    169.254.169.254      (the metadata stand-in)
                                                     198.19.1.1           (the API server, for pods)

A node namespace holds that node's kubelet, containerd, kube-proxy, kube-router and pods; the
outside namespace stands for what lies beyond the nodes: the internet, a cloud's metadata
service, the API server's address, and the wire between nodes (its bridge joins the nodes'
links, as a switch joins machines). No namespace has a default route: a node routes the
stand-ins to the outside namespace and each other node's pod range to that node's address,
as a cluster's network routes pod ranges; the outside namespace routes each pod range back
to its node; any other destination is unreachable. Every address is in a range reserved for
documentation or benchmarks (RFC 5737, RFC 2544) or link-local, so nothing here could be
mistaken for a real host even if it escaped, and nothing can escape: no interface of any of
them is joined to the host's.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import netns

POD_RANGE = "198.18.0.0/16"
"""Every node's pod range lies in it (the cluster's pod range)."""
LINK_CIDR = "198.19.0.0/24"
"""The nodes' link: each node's address and the outside namespace's."""
OUTSIDE_IP = "198.19.0.1"
API_SERVER_IP = "198.19.1.1"
"""Where pods reach the API server (the ``kubernetes`` Service's endpoint)."""
INTERNET_IPS = ("203.0.113.10", "203.0.113.20")
"""The stand-in internet: two hosts, so a test can allow one and see the other refused."""
INTERNET_CIDR = "203.0.113.0/24"
METADATA_IP = "169.254.169.254"
MAX_NODES = 16
BRIDGE = "br0"


def node_ip(index: int) -> str:
    """Node ``index``'s address on the link."""
    return f"198.19.0.{2 + index}"


def pod_cidr(index: int) -> str:
    """Node ``index``'s pod range."""
    return f"198.18.{index}.0/24"


def pod_gateway(index: int) -> str:
    """Node ``index``'s address on its pods' bridge (their gateway)."""
    return f"198.18.{index}.1"


NODE_IP = node_ip(0)
"""The first node's address (the only one's, with one node)."""
POD_CIDR = pod_cidr(0)
"""The first node's pod range."""
POD_GATEWAY = pod_gateway(0)


@dataclass(frozen=True)
class NodeNetwork:
    """One node's place in the network: its namespace, the outside one, its addresses."""

    node: str
    outside: str
    index: int = 0

    @property
    def node_ip(self) -> str:
        return node_ip(self.index)

    @property
    def pod_cidr(self) -> str:
        return pod_cidr(self.index)

    @property
    def pod_gateway(self) -> str:
        return pod_gateway(self.index)

    @property
    def link_name(self) -> str:
        """The outside end of the node's link (a port of the bridge)."""
        return f"n{self.index}"


@dataclass(frozen=True)
class NodesNetwork:
    """The namespaces of one set of real nodes, by name."""

    outside: str
    nodes: tuple[NodeNetwork, ...]

    @classmethod
    def named(cls, prefix: str, count: int = 1) -> NodesNetwork:
        """``<prefix>out`` and ``<prefix>node0`` ... ``<prefix>node<count-1>``."""
        if not 1 <= count <= MAX_NODES:
            raise ValueError(f"between 1 and {MAX_NODES} real nodes, not {count}")
        outside = f"{prefix}out"
        nodes = tuple(NodeNetwork(f"{prefix}node{i}", outside, i) for i in range(count))
        return cls(outside=outside, nodes=nodes)

    @property
    def namespaces(self) -> list[str]:
        """Every namespace of the set, the outside one last."""
        return [n.node for n in self.nodes] + [self.outside]

    def relay_routes(self) -> dict[str, str]:
        """Which namespace the relay dials each node's address and pod range from."""
        routes: dict[str, str] = {}
        for place in self.nodes:
            routes[f"{place.node_ip}/32"] = place.node
            routes[place.pod_cidr] = place.node
        return routes

    def create(self) -> None:
        """Make the namespaces, the links, the stand-ins and the routes."""
        out = self.outside
        netns.add(out)
        netns.ip("link", "add", BRIDGE, "type", "bridge", netns=out)
        netns.ip("addr", "add", f"{OUTSIDE_IP}/24", "dev", BRIDGE, netns=out)
        netns.ip("link", "set", BRIDGE, "up", netns=out)
        # The stand-ins sit on the outside namespace's loopback: local to it, reachable only
        # through the nodes' links (this kernel has no dummy interfaces).
        for address in (*INTERNET_IPS, METADATA_IP, API_SERVER_IP):
            netns.ip("addr", "add", f"{address}/32", "dev", "lo", netns=out)
        netns.sysctl(out, "net.ipv4.ip_forward", "0")
        for node in self.nodes:
            self._link(node)
        for node in self.nodes:
            netns.ip("route", "add", node.pod_cidr, "via", node.node_ip, netns=out)
            for other in self.nodes:
                if other is not node:
                    netns.ip("route", "add", other.pod_cidr, "via", other.node_ip,
                             netns=node.node)  # fmt: skip

    def _link(self, node: NodeNetwork) -> None:
        netns.add(node.node)
        netns.ip("link", "add", "eth0", "type", "veth", "peer", "name", node.link_name,
                 "netns", self.outside, netns=node.node)  # fmt: skip
        netns.ip("addr", "add", f"{node.node_ip}/24", "dev", "eth0", netns=node.node)
        netns.ip("link", "set", node.link_name, "master", BRIDGE, "up", netns=self.outside)
        netns.ip("link", "set", "eth0", "up", netns=node.node)
        for destination in (INTERNET_CIDR, f"{METADATA_IP}/32", f"{API_SERVER_IP}/32"):
            netns.ip("route", "add", destination, "via", OUTSIDE_IP, netns=node.node)
        # Pods' traffic is routed by the node namespace (as a node routes its pods'), and
        # bridged traffic passes iptables there, where kube-proxy and kube-router filter it.
        netns.sysctl(node.node, "net.ipv4.ip_forward", "1")
        netns.sysctl(node.node, "net.bridge.bridge-nf-call-iptables", "1")

    def set_link(self, index: int, *, up: bool) -> None:
        """Bring node ``index``'s link to the others and the outside down (or up again)."""
        node = self.nodes[index]
        netns.ip("link", "set", node.link_name, "up" if up else "down", netns=self.outside)

    def delete(self) -> None:
        """Remove every namespace and every process still in them."""
        for space in self.namespaces:
            netns.delete(space)
