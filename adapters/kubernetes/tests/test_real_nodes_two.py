"""Two real nodes: an app's pods reach each other across them, and NetworkPolicy blocks
across them as on one node.

The cluster is the ``two_real_nodes_cluster`` fixture's: two kubelets, each with its own
containerd, pod range and network namespace, linked by the harness (a bridge in the outside
namespace) with a route to each other's pod range, as a cluster's network routes them; no
route out of the machine. Each workload is placed on the node a test wants by cordoning the
other while it is applied; each test first checks the pods landed where it meant, so a
"cross-node" result is one.
"""

from __future__ import annotations

from typing import Any

from _real import MARKS, new_id, serve, sh
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
