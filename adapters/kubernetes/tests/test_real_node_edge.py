"""The edge on a real node: its Service, through kube-proxy, serves what the app exposes.

The edge (two busybox pods forwarding TCP with ``nc``) reaches an app's workload only on the
ports the plan exposes: the app's policy admits the edge's pods there and nowhere else.
Its NodePort Service is reached from the node's own namespace, as a load balancer in front of
the node would.
"""

# ruff: noqa: ASYNC110 - polls of what another process changes (pods, iptables rules)
from __future__ import annotations

from typing import Any

import anyio
from _real import IMAGE, MARKS, connects_from_async, new_id, serve, wait_for
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import namespace_for

from pando_runtime import BundlePlan, BundleRef, EdgePlan, EdgePort, ExecRequest, Port, WorkloadRef

pytestmark = MARKS


async def test_the_edge_serves_exposed_ports_through_kube_proxy(
    real_adapter: KubernetesAdapter, real_node_cluster: Any
) -> None:
    from localcluster.realnode import network  # noqa: PLC0415

    app = new_id("edged")
    ns = namespace_for(app)
    await real_adapter.apply(
        BundlePlan(
            bundle_id=app,
            workloads=(
                serve("web", 8080, ports=(Port(8080),), exposed=True),
                serve("hidden", 8081, ports=(Port(8081),)),
            ),
        )
    )
    forward = " & ".join(
        f"nc -ll -p {port} -e nc {name}.{ns}.svc.cluster.local {port}"
        for name, port in (("web", 8080), ("hidden", 8081))
    )
    edge = EdgePlan(
        name=new_id("edge"),
        image=IMAGE,
        args=("sh", "-c", f"{forward} & wait"),
        ports=(EdgePort(published=30080, target=8080), EdgePort(published=30081, target=8081)),
    )
    node_ns = real_node_cluster.local.real_node.network.node
    try:
        await wait_for(real_adapter, app, lambda o: o.all_running)
        await real_adapter.apply_edge(edge)
        with anyio.fail_after(90):
            while not (await real_adapter.observe_edge(edge.name)).running:
                await anyio.sleep(0.5)
        body = None
        with anyio.move_on_after(30):  # kube-proxy's rules follow the endpoints
            while not (body := await connects_from_async(node_ns, network.NODE_IP, 30080)):
                await anyio.sleep(0.5)
        assert body is not None
        assert body.endswith(b"ok-web\n")
        # The edge's pods listen on 8081 too, but the app admits them on exposed ports only;
        # the hidden workload does serve (its own app reaches it), so the block is the policy's.
        assert not await connects_from_async(node_ns, network.NODE_IP, 30081)
        control = await real_adapter.run(
            WorkloadRef(app, "web"),
            ExecRequest(command=("wget", "-q", "-T", "4", "-O", "-", "http://hidden:8081/")),
        )
        assert control.stdout == b"ok-hidden\n"
    finally:
        await real_adapter.remove_edge(edge.name)
        await real_adapter.destroy(BundleRef(app))
