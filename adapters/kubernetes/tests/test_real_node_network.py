"""NetworkPolicy in effect on a real node: what an app's pods can and cannot reach.

kube-router enforces the policies the adapter writes. The stand-in internet
(``203.0.113.10`` and ``.20``), the metadata stand-in (``169.254.169.254``) and the API
server's address for pods sit in the real node's outside namespace: every address here is
local to a namespace the harness made, with no route out. Each "cannot reach" is paired with
a control that shows the target does answer, so a block is the policy's and not a dead end.
"""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from _real import MARKS, new_id, serve, sh, wait_for
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import namespace_for

from pando_runtime import (
    BundlePlan,
    BundleRef,
    EgressPolicy,
    EgressRule,
    ExecRequest,
    NetworkPlan,
    Port,
    WorkloadRef,
)

pytestmark = MARKS


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"standin-{self.server.server_address[0]}\n".encode()  # type: ignore[index]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def standins(real_node_cluster: Any) -> Iterator[dict[str, str]]:
    """HTTP servers on port 80 of the stand-in addresses, inside the outside namespace."""
    from localcluster.realnode import netns, network  # noqa: PLC0415

    outside = real_node_cluster.local.real_node.network.outside
    addresses = {
        "internet": network.INTERNET_IPS[0],
        "other_internet": network.INTERNET_IPS[1],
        "metadata": network.METADATA_IP,
    }
    servers = []
    for address in addresses.values():
        with netns.entered(outside):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, 80))
        server = http.server.ThreadingHTTPServer((address, 80), _Answer, bind_and_activate=False)
        server.socket.close()
        server.socket = sock
        server.server_activate()
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    try:
        yield addresses
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


async def _fetch(adapter: KubernetesAdapter, ref: WorkloadRef, url: str) -> bytes | None:
    """The body a pod gets from ``url``, or None when it cannot connect."""
    result = await adapter.run(ref, ExecRequest(command=("wget", "-q", "-T", "4", "-O", "-", url)))
    return result.stdout if result.exit_code == 0 else None


SERVED_WITHIN = 60.0
"""Seconds a server that is still starting (the egress gateway) has to answer."""


async def _fetch_once_served(
    adapter: KubernetesAdapter, ref: WorkloadRef, url: str
) -> bytes | None:
    """As :func:`_fetch`, asked again while nothing answers (a server still starting)."""
    with anyio.move_on_after(SERVED_WITHIN):
        while (body := await _fetch(adapter, ref, url)) is None:  # noqa: ASYNC110 - polled
            await anyio.sleep(1)
        return body
    return None


async def _tcp(adapter: KubernetesAdapter, ref: WorkloadRef, host: str, port: int) -> bool:
    """Whether a pod can open a TCP connection to ``host:port``."""
    script = f"echo | timeout 4 nc {host} {port} >/dev/null 2>&1"
    result = await adapter.run(ref, ExecRequest(command=("sh", "-c", script)))
    return result.exit_code == 0


async def test_ingress_only_from_the_app_itself(real_adapter: KubernetesAdapter) -> None:
    app, other = new_id("ingress"), new_id("intruder")
    await real_adapter.apply(
        BundlePlan(
            bundle_id=app,
            workloads=(serve("web", 8080, ports=(Port(8080),)), sh("peer", "sleep 3600")),
        )
    )
    await real_adapter.apply(BundlePlan(bundle_id=other, workloads=(sh("probe", "sleep 3600"),)))
    try:
        await wait_for(real_adapter, app, lambda o: o.all_running)
        await wait_for(real_adapter, other, lambda o: o.all_running)
        url = f"http://web.{namespace_for(app)}.svc.cluster.local:8080/"
        assert await _fetch(real_adapter, WorkloadRef(app, "peer"), url) == b"ok-web\n"
        assert await _fetch(real_adapter, WorkloadRef(other, "probe"), url) is None
    finally:
        await real_adapter.destroy(BundleRef(app))
        await real_adapter.destroy(BundleRef(other))


async def test_default_egress_reaches_dns_and_internet_not_cluster_or_metadata(
    real_adapter: KubernetesAdapter, standins: dict[str, str], real_node_cluster: Any
) -> None:
    from localcluster.realnode import network  # noqa: PLC0415

    app, neighbour = new_id("egress"), new_id("neighbour")
    await real_adapter.apply(BundlePlan(bundle_id=app, workloads=(sh("probe", "sleep 3600"),)))
    await real_adapter.apply(
        BundlePlan(bundle_id=neighbour, workloads=(serve("web", 8080, ports=(Port(8080),)),))
    )
    try:
        await wait_for(real_adapter, app, lambda o: o.all_running)
        await wait_for(real_adapter, neighbour, lambda o: o.all_running)
        probe = WorkloadRef(app, "probe")
        # Cluster DNS answers (UDP and TCP to the DNS pods are allowed).
        lookup = await real_adapter.run(
            probe, ExecRequest(command=("nslookup", "allowed.pando.test"))
        )
        assert lookup.exit_code == 0
        assert network.INTERNET_IPS[0].encode() in lookup.stdout
        # The stand-in internet answers.
        internet = f"http://{standins['internet']}/"
        assert (
            await _fetch(real_adapter, probe, internet)
            == f"standin-{standins['internet']}\n".encode()
        )
        # Never the metadata address, another app, a Service address or the API server.
        assert await _fetch(real_adapter, probe, f"http://{standins['metadata']}/") is None
        neighbour_url = f"http://web.{namespace_for(neighbour)}.svc.cluster.local:8080/"
        assert await _fetch(real_adapter, probe, neighbour_url) is None
        api_port = real_node_cluster.local.ports["apiserver"]
        assert not await _tcp(real_adapter, probe, network.API_SERVER_IP, api_port)
        assert not await _tcp(real_adapter, probe, "10.96.0.1", 443)
        # Controls: the neighbour's own pods reach what the probe cannot, so each block above
        # is the policy's.
        peer = WorkloadRef(neighbour, "web")
        assert await _fetch(real_adapter, peer, "http://127.0.0.1:8080/") == b"ok-web\n"
        assert await _fetch(real_adapter, peer, f"http://{standins['metadata']}/") is None
    finally:
        await real_adapter.destroy(BundleRef(app))
        await real_adapter.destroy(BundleRef(neighbour))


async def test_restricted_egress_lets_only_the_plans_rules_through(
    real_adapter: KubernetesAdapter, standins: dict[str, str]
) -> None:
    await real_adapter.health_check()  # the canary: finds egress enforced
    caps = await real_adapter.capabilities()
    assert caps.egress_restriction
    assert caps.egress_host_names
    app = new_id("restricted")
    rules = (
        EgressRule(destination=f"{standins['internet']}/32", ports=(80,)),
        EgressRule(destination="other.pando.test", ports=(80,)),
    )
    plan = BundlePlan(
        bundle_id=app,
        workloads=(sh("probe", "sleep 3600"),),
        network=NetworkPlan(egress=EgressPolicy(allow=rules)),
    )
    await real_adapter.apply(plan)
    try:
        await wait_for(real_adapter, app, lambda o: o.all_running, timeout=90)
        probe = WorkloadRef(app, "probe")
        direct = (
            "sh",
            "-c",
            "unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY; wget -q -T 4 -O - ",
        )
        # The CIDR rule: straight to the allowed address; the other address is refused.
        allowed = await real_adapter.run(
            probe, ExecRequest(command=(*direct[:2], direct[2] + f"http://{standins['internet']}/"))
        )
        assert allowed.exit_code == 0, allowed
        refused = await real_adapter.run(
            probe,
            ExecRequest(command=(*direct[:2], direct[2] + f"http://{standins['other_internet']}/")),
        )
        assert refused.exit_code != 0
        # The host-name rule: through the gateway (the pod's HTTP_PROXY) by name only. The
        # gateway is a pod of its own, which the app's running workloads do not wait for.
        named = await _fetch_once_served(real_adapter, probe, "http://other.pando.test/")
        assert named == f"standin-{standins['other_internet']}\n".encode()
        # A name the plan does not name is refused by the gateway (403), though it resolves to
        # an address a CIDR rule allows: names pass only by name.
        refused_name = await real_adapter.run(
            probe,
            ExecRequest(command=("wget", "-q", "-T", "4", "-O", "-", "http://allowed.pando.test/")),
        )
        assert refused_name.exit_code != 0
        assert b"403" in refused_name.stderr, refused_name
    finally:
        await real_adapter.destroy(BundleRef(app))


async def test_a_restricted_plan_applied_first_thing_runs_once_the_canary_looked(
    real_adapter_config: dict[str, Any], standins: dict[str, str]
) -> None:
    """No ``trust_*`` setting and no health check: the plan's apply runs the canary first."""
    assert not any(key.startswith("trust_") for key in real_adapter_config)
    app = new_id("first")
    plan = BundlePlan(
        bundle_id=app,
        workloads=(sh("probe", "sleep 3600"),),
        network=NetworkPlan(
            egress=EgressPolicy(
                allow=(EgressRule(destination=f"{standins['internet']}/32", ports=(80,)),)
            )
        ),
    )
    async with KubernetesAdapter(real_adapter_config) as adapter:
        await adapter.apply(plan)  # first thing: the canary looks, finds egress enforced
        try:
            assert adapter.canary_runs == 1
            caps = await adapter.capabilities()
            assert caps.private_network
            assert caps.egress_restriction
            assert caps.egress_host_names  # the gateway's image is configured
            assert adapter.health_details()["egress_restriction"] == "enforced"
            await wait_for(adapter, app, lambda o: o.all_running, timeout=90)
            probe = WorkloadRef(app, "probe")
            direct = "unset http_proxy HTTP_PROXY; wget -q -T 4 -O - http://{}/"
            allowed = await adapter.run(
                probe, ExecRequest(command=("sh", "-c", direct.format(standins["internet"])))
            )
            refused = await adapter.run(
                probe, ExecRequest(command=("sh", "-c", direct.format(standins["other_internet"])))
            )
            assert allowed.exit_code == 0, allowed
            assert refused.exit_code != 0, "the plan's rules hold"
            await adapter.health_check()  # verified already: no second run
            assert adapter.canary_runs == 1
        finally:
            await adapter.destroy(BundleRef(app))
