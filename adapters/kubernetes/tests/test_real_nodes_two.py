"""Two real nodes: an app's pods reach each other across them, NetworkPolicy blocks across
them as on one node, and a pod reaches none of the other node's programs.

The cluster is the ``two_real_nodes_cluster`` fixture's: two kubelets, each with its own
containerd, pod range and network namespace, linked by the harness (a bridge in the outside
namespace) with a route to each other's pod range, as a cluster's network routes them; no
route out of the machine. Each workload is placed on the node a test wants by cordoning the
other while it is applied; each test first checks the pods landed where it meant, so a
"cross-node" result is one.
"""

from __future__ import annotations

import contextlib
import ipaddress
from typing import Any

import anyio.to_thread
from _real import MARKS, connects_from_async, new_id, serve, sh
from _two_nodes import apply_placed, node_names
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import namespace_for

from pando_runtime import BundleRef, ExecRequest, Port, WorkloadRef

pytestmark = MARKS


async def _fetch(adapter: KubernetesAdapter, ref: WorkloadRef, url: str) -> bytes | None:
    """The body a pod gets from ``url``, or None when it cannot connect."""
    result = await adapter.run(ref, ExecRequest(command=("wget", "-q", "-T", "4", "-O", "-", url)))
    return result.stdout if result.exit_code == 0 else None


async def test_pods_of_one_app_reach_each_other_across_nodes(
    two_nodes_adapter: KubernetesAdapter, two_nodes_admin_api: Any, two_real_nodes_cluster: Any
) -> None:
    first, second = node_names(two_real_nodes_cluster)
    app = new_id("across")
    web, client = serve("web", 8080, ports=(Port(8080),)), sh("client", "sleep 3600")
    try:
        pods = await apply_placed(
            two_nodes_adapter, two_nodes_admin_api, (first, second), app,
            [(web, first), (client, second)],
        )  # fmt: skip
        assert {w: p["node"] for w, p in pods.items()} == {"web": first, "client": second}
        caller = WorkloadRef(app, "client")
        # By the Service's name (cluster DNS on the first node, kube-proxy on the second)...
        service = f"http://web.{namespace_for(app)}.svc.cluster.local:8080/"
        assert await _fetch(two_nodes_adapter, caller, service) == b"ok-web\n"
        # ... and straight to the pod's address, routed from one node's range to the other's.
        direct = f"http://{pods['web']['ip']}:8080/"
        assert await _fetch(two_nodes_adapter, caller, direct) == b"ok-web\n"
    finally:
        await two_nodes_adapter.destroy(BundleRef(app))


async def test_ingress_isolation_between_apps_holds_across_nodes(
    two_nodes_adapter: KubernetesAdapter, two_nodes_admin_api: Any, two_real_nodes_cluster: Any
) -> None:
    first, second = node_names(two_real_nodes_cluster)
    nodes = (first, second)
    app, other = new_id("guarded"), new_id("intruder")
    try:
        pods = await apply_placed(
            two_nodes_adapter, two_nodes_admin_api, nodes, app,
            [(serve("web", 8080, ports=(Port(8080),)), first), (sh("peer", "sleep 3600"), second)],
        )  # fmt: skip
        intruders = await apply_placed(
            two_nodes_adapter, two_nodes_admin_api, nodes, other,
            [(serve("far", 8080, ports=(Port(8080),)), second), (sh("near", "sleep 3600"), first)],
        )  # fmt: skip
        placed = {w: p["node"] for w, p in (pods | intruders).items()}
        assert placed == {"web": first, "peer": second, "far": second, "near": first}
        direct = f"http://{pods['web']['ip']}:8080/"
        service = f"http://web.{namespace_for(app)}.svc.cluster.local:8080/"
        # The control: the app's own pod on the other node gets through.
        assert await _fetch(two_nodes_adapter, WorkloadRef(app, "peer"), direct) == b"ok-web\n"
        # Another app's pod is refused from the other node, as from the same node.
        for intruder in ("far", "near"):
            ref = WorkloadRef(other, intruder)
            assert await _fetch(two_nodes_adapter, ref, direct) is None, intruder
            assert await _fetch(two_nodes_adapter, ref, service) is None, intruder
        # The intruder's own pods reach each other across the nodes, so the refusals above
        # are the policy's, not a broken route.
        own = f"http://{intruders['far']['ip']}:8080/"
        assert await _fetch(two_nodes_adapter, WorkloadRef(other, "near"), own) == b"ok-far\n"
    finally:
        await two_nodes_adapter.destroy(BundleRef(app))
        await two_nodes_adapter.destroy(BundleRef(other))


# -- the other node's programs -------------------------------------------------------------------


def _node_targets(node: Any) -> list[tuple[str, int]]:
    """Every (address, port) where something listens in ``node``'s namespace that another
    namespace could reach: each socket bound to one of its addresses, and one bound to every
    address at the node's address and its pods' gateway. Loopback ones are the node's alone."""
    from localcluster.realnode import netns  # noqa: PLC0415

    targets: set[tuple[str, int]] = set()
    for address, port in netns.tcp_listeners(node.network.node):
        if address in {"*", "0.0.0.0", "::"}:  # noqa: S104 - read, not bound
            targets |= {(node.network.node_ip, port), (node.network.pod_gateway, port)}
            continue
        ip = ipaddress.ip_address(address)
        # The nodes' link has no IPv6 route: an IPv6 address is reached from its own link only.
        if not ip.is_loopback and ip.version == 4:
            targets.add((address, port))
    return sorted(targets)


async def _pod_connects(
    adapter: KubernetesAdapter, ref: WorkloadRef, targets: list[tuple[str, int]]
) -> dict[tuple[str, int], bool]:
    """Whether a TCP connection from the pod to each target opens, all tried at once."""
    script = "t() { if echo | timeout 4 nc $1 $2 >/dev/null 2>&1; then r=open; else r=shut; fi"
    script += "; echo $1 $2 $r; }; " + " ".join(f"t {a} {p} &" for a, p in targets) + " wait"
    result = await adapter.run(ref, ExecRequest(command=("sh", "-c", script)))
    assert result.exit_code == 0, result
    seen = {
        (a, int(p)): r == "open"
        for a, p, r in (x.split() for x in result.stdout.decode().splitlines())
    }
    assert sorted(seen) == sorted(targets), result
    return seen


async def test_a_pod_reaches_none_of_the_other_nodes_programs(
    two_nodes_adapter: KubernetesAdapter, two_nodes_admin_api: Any, two_real_nodes_cluster: Any
) -> None:
    from localcluster.realnode import netns  # noqa: PLC0415

    nodes = two_real_nodes_cluster.local.real_node_set.nodes
    names = node_names(two_real_nodes_cluster)
    excluded = [
        ipaddress.ip_network(r)
        for r in two_nodes_adapter.health_details()["egress_excluded"].split(",")
    ]
    app = new_id("othernode")
    probes = [serve(f"probe{i}", 8080, ports=(Port(8080),)) for i in range(len(nodes))]
    with contextlib.ExitStack() as stack:
        # Beside kubelet (on the node's address), a program on every address of each node.
        extra = [stack.enter_context(netns.serving(n.network.node, b"ok-node\n")) for n in nodes]
        try:
            pods = await apply_placed(
                two_nodes_adapter,
                two_nodes_admin_api,
                names,
                app,
                list(zip(probes, names, strict=True)),
            )
            assert {w: p["node"] for w, p in pods.items()} == {
                "probe0": names[0],
                "probe1": names[1],
            }
            for here, there in ((0, 1), (1, 0)):
                other = nodes[there]
                targets = await anyio.to_thread.run_sync(_node_targets, other)
                net = other.network
                assert {(net.node_ip, 10250), (net.node_ip, extra[there]),
                        (net.pod_gateway, extra[there])} <= set(targets), targets  # fmt: skip
                for address, port in targets:
                    # Controls: it answers in the node, and from the other node (the route).
                    assert await connects_from_async(net.node, address, port) is not None
                    here_ns = nodes[here].network.node
                    assert await connects_from_async(here_ns, address, port) is not None
                    # Each lies in a range the app's policy excepts (node_cidr, pod_cidr).
                    ip = ipaddress.ip_address(address)
                    assert any(ip in r for r in excluded), (address, excluded)
                # The pod on this node: the other node's pod answers (the same nc, the same
                # route), none of the node's own ports do.
                peer = (pods[f"probe{there}"]["ip"], 8080)
                reached = await _pod_connects(
                    two_nodes_adapter, WorkloadRef(app, f"probe{here}"), [peer, *targets]
                )
                assert reached.pop(peer), "a pod reaches its app's pod on the other node"
                assert not any(reached.values()), [t for t, ok in reached.items() if ok]
        finally:
            await two_nodes_adapter.destroy(BundleRef(app))
