"""Private networks in effect: from outside an app only its exposed ports answer.

With ``egress_guard_image`` set (and ``upstream_mode: address``) the adapter declares
``private_network``. Dialled from the daemon's namespace (where the host's proxy runs) and from
inside an edge: an exposed workload's listed port answers (the control), a port it does not
list and a workload that is not exposed are refused; the app's own client reaches both. These
need the harness's engine (its namespace to dial from, the iptables image it builds).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from _docker_harness import BUSYBOX, DockerHarness
from _docker_tests import adapter_config
from _probes import PAGE, address_on, answered, fetch, running, workload
from pando_runtime_docker import DockerAdapter
from pando_runtime_docker.manifests import edge_bridge, private_chain

import pando_runtime as pr

# What these tests show is the same on either backend; the kit runs on both (its streams).
pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

TWO_PORTS = (
    "sh",
    "-c",
    (
        f"mkdir -p /www && echo {PAGE} > /www/index.html && httpd -p 8081 -h /www "
        "&& exec httpd -f -p 8080 -h /www"
    ),
)
"""A server on 8080 (listed in the plan) and on 8081 (not listed)."""


@pytest.fixture
def rules_removed(engine: Any, owner: str) -> Iterator[list[str]]:
    """Every jump to a chain the test names, and the edge reply rule, removed afterwards
    (they match subnets of the pool, which other tests carve again)."""
    chains: list[str] = []
    yield chains
    bridge = edge_bridge(owner)
    for parent in ("DOCKER-USER", "INPUT", "OUTPUT"):
        listed = engine.run_in_netns(["iptables", "-w", "-S", parent]).stdout.splitlines()
        for rule in listed:
            ours = any(rule.endswith(f"-j {c}") for c in chains) or f"-o {bridge} " in rule
            if rule.startswith("-A ") and ours:
                engine.run_in_netns(["iptables", "-w", "-D", *rule.split()[1:]])


def plan() -> pr.BundlePlan:
    web = pr.WorkloadPlan(
        name="web", image=BUSYBOX, command=TWO_PORTS, ports=(pr.Port(8080),), exposed=True
    )
    hidden = pr.WorkloadPlan(
        name="hidden", image=BUSYBOX, command=TWO_PORTS, ports=(pr.Port(8080),)
    )
    return pr.BundlePlan(bundle_id="priv", workloads=(web, hidden, workload("client")))


def dial(engine: Any, address: str, port: int) -> str:
    """GET / from the daemon's namespace; its answer."""
    with engine.connect(address, port) as conn:
        conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
        conn.settimeout(10)
        return b"".join(iter(lambda: conn.recv(65536), b"")).decode()


async def answers(engine: Any, address: str, port: int) -> str:
    """The answer once the server listens (running is not listening: polled)."""
    with anyio.fail_after(30):
        while True:
            try:
                return await anyio.to_thread.run_sync(dial, engine, address, port)
            except ConnectionRefusedError:
                await anyio.sleep(0.1)


async def reached(harness: DockerHarness, container: str, address: str, port: int) -> bool:
    with anyio.fail_after(30):
        while not answered(await fetch(harness, container, address, port), PAGE):  # noqa: ASYNC110 - polls the server
            await anyio.sleep(0.1)
    return True


# Docker 28.2 and later drop what is routed to a container from another bridge (the edge's).
@pytest.mark.every_engine
async def test_only_exposed_ports_answer_the_host_and_the_edge(  # noqa: PLR0917 - fixtures
    docker_host: str,
    owner: str,
    harness: DockerHarness,
    engine: Any,
    guard_image: str,
    rules_removed: list[str],
) -> None:
    config = adapter_config(docker_host, owner, egress_guard_image=guard_image)
    rules_removed.append(private_chain(owner, "priv"))
    async with DockerAdapter(config) as adapter:
        assert adapter.egress_guard is not None
        rules_removed += [adapter.egress_guard.chain, adapter.egress_guard.host_chain]
        try:
            # Each engine is spoken to at its newest API (1.41 on 20.10, 1.51 on 28.5).
            assert await adapter.transport.version() == engine.api.ping()
            assert (await adapter.capabilities()).supports("private_network")
            await running(adapter, plan())
            web = await address_on(harness, adapter, "priv", "web")
            hidden = await address_on(harness, adapter, "priv", "hidden")
            client = adapter.naming.container_name("priv", "client")
            # The app's own client reaches every port of both (and shows they listen).
            for address, port in ((web, 8080), (web, 8081), (hidden, 8080)):
                assert await reached(harness, client, address, port)
            # The daemon's namespace: the exposed, listed port answers (the control) ...
            assert answered(await answers(engine, web, 8080), PAGE)
            # ... a port the plan does not list, and a workload not exposed, are refused.
            for address, port in ((web, 8081), (hidden, 8080)):
                with pytest.raises(ConnectionRefusedError):
                    await anyio.to_thread.run_sync(dial, engine, address, port)
            # Re-applying the same plan writes no rule (and makes no call at all).
            calls = adapter.stats.calls
            await adapter.apply(plan())
            assert adapter.stats.calls == calls

            # The edge: routed to bundles through the daemon, held to the same ports.
            edge_plan = pr.EdgePlan(name="front", image=BUSYBOX, args=("sleep", "600"))
            await adapter.apply_edge(edge_plan)
            with anyio.fail_after(30):
                while not (await adapter.observe_edge("front")).running:  # noqa: ASYNC110 - polls the daemon
                    await anyio.sleep(0.1)
            edge = f"{owner}_edge.front"
            networks = (await harness.inspect(edge))["NetworkSettings"]["Networks"]
            assert list(networks) == [f"{owner}_edge"]
            assert await reached(harness, edge, web, 8080)  # the control
            for address, port in ((web, 8081), (hidden, 8080)):
                assert not answered(await fetch(harness, edge, address, port), PAGE)
            # Destroy removes the bundle's chain and its jumps (present until then).
            chain = private_chain(owner, "priv")
            assert chain in engine.run_in_netns(["iptables", "-w", "-S", "OUTPUT"]).stdout
            await adapter.destroy(pr.BundleRef("priv"))
            for parent in ("OUTPUT", "DOCKER-USER"):
                rules = engine.run_in_netns(["iptables", "-w", "-S", parent]).stdout
                assert chain not in rules, rules
        finally:
            await harness.remove_owned(owner)


async def test_without_the_guard_image_private_network_is_not_declared(docker_host: str) -> None:
    unguarded = DockerAdapter(adapter_config(docker_host, "nobody"))
    assert not (await unguarded.capabilities()).supports("private_network")
    proxied = DockerAdapter(
        adapter_config(
            docker_host,
            "nobody",
            egress_guard_image="any",
            upstream_mode="proxy_container",
            proxy_container="host-proxy",
        )
    )
    assert not (await proxied.capabilities()).supports("private_network")
