"""The edge in effect: its ports published in the engine's namespace, apps reached from it.

Every connection is made from inside the engine's network namespace (``docker_engine``'s
``connect``), or from inside the edge container: no address outside the harness is dialled.
"""

from __future__ import annotations

from typing import Any

import anyio
import attrs
import pytest
from _docker_harness import BUSYBOX, DockerHarness
from _docker_tests import adapter_config
from _probes import PAGE, SERVE, address_on, answered, fetch, running
from pando_runtime_docker import DockerAdapter

import pando_runtime as pr

# What these tests show is the same on either backend; the kit runs on both (its streams).
pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

EDGE_PAGE = "pando-edge-front"
EDGE_SERVE = (
    "sh",
    "-c",
    f"mkdir -p /www && echo {EDGE_PAGE} > /www/index.html && exec httpd -f -p 80 -h /www",
)
PUBLISHED = 18080


def web_bundle(bundle_id: str) -> pr.BundlePlan:
    web = pr.WorkloadPlan(
        name="web", image=BUSYBOX, command=SERVE, ports=(pr.Port(8080),), exposed=True
    )
    return pr.BundlePlan(bundle_id=bundle_id, workloads=(web,))


def edge_plan(**more: Any) -> pr.EdgePlan:
    fields: dict[str, Any] = {
        "name": "front",
        "image": BUSYBOX,
        "args": EDGE_SERVE,
        "ports": (pr.EdgePort(published=PUBLISHED, target=80),),
    }
    return pr.EdgePlan(**{**fields, **more})


def http_get(engine: Any, port: int) -> bytes:
    """GET / on the engine namespace's loopback (where the daemon publishes ports)."""
    with engine.connect("127.0.0.1", port) as conn:
        conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
        conn.settimeout(10)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    return data


async def published_answer(engine: Any, port: int) -> bytes:
    """The answer on a published port, once the server behind it listens."""
    with anyio.fail_after(30):
        while True:
            try:
                answer = await anyio.to_thread.run_sync(http_get, engine, port)
            except (ConnectionRefusedError, ConnectionResetError):
                answer = b""
            if EDGE_PAGE.encode() in answer:  # the proxy accepts before the edge listens
                return answer
            await anyio.sleep(0.1)


async def serving(adapter: DockerAdapter, name: str) -> pr.EdgeState:
    with anyio.fail_after(30):
        while not (state := await adapter.observe_edge(name)).running:  # noqa: ASYNC110 - polls the daemon
            await anyio.sleep(0.1)
    return state


async def reaches(harness: DockerHarness, container: str, address: str, port: int) -> bool:
    """Whether ``container`` gets the app's page from ``address:port`` (polled a while)."""
    with anyio.fail_after(30):
        while True:
            if answered(await fetch(harness, container, address, port), PAGE):
                return True
            await anyio.sleep(0.1)


async def test_the_edge_publishes_its_ports_and_reaches_apps(
    docker_engine: Any, owner: str, harness: DockerHarness
) -> None:
    host = f"unix://{docker_engine.socket_path}"
    async with DockerAdapter(adapter_config(host, owner)) as adapter:
        try:
            await running(adapter, web_bundle("before"))
            await adapter.apply_edge(edge_plan())
            state = await serving(adapter, "front")
            assert "80/tcp" in state.detail
            assert b"200 OK" in await published_answer(docker_engine, PUBLISHED)
            # Controls: a port the edge does not publish, and the app's own port, are refused
            # on the same loopback: the edge is the only container with published ports.
            for port in (PUBLISHED + 1, 8080):
                with pytest.raises(ConnectionRefusedError):
                    await anyio.to_thread.run_sync(http_get, docker_engine, port)

            edge = f"{owner}_edge.front"
            inspected = await harness.inspect(edge)
            assert inspected["Config"]["Labels"]["io.pando.edge-owner"] == owner
            assert inspected["HostConfig"]["PortBindings"] == {
                "80/tcp": [{"HostIp": "", "HostPort": str(PUBLISHED)}]
            }
            # A bundle network that existed before the edge, and one made after it: joined.
            await running(adapter, web_bundle("after"))
            for bundle in ("before", "after"):
                address = await address_on(harness, adapter, bundle, "web")
                assert await reaches(harness, edge, address, 8080)
                assert not answered(await fetch(harness, edge, address, 8081), PAGE)  # control
            # A network with the edge on it is still removed with its bundle.
            await adapter.destroy(pr.BundleRef("before"))
            listed = await harness.docker("network", "ls", "-q", "--filter", f"name={owner}.before")
            assert not listed.split()
        finally:
            await harness.remove_owned(owner)


async def test_the_edge_is_applied_like_a_bundle_and_keeps_its_volumes(
    docker_host: str, owner: str, harness: DockerHarness
) -> None:
    secret = "edge-secret-value-81"  # noqa: S105 - a test value, looked for in labels
    mounted = edge_plan(
        env={"TOKEN": secret}, mounts=(pr.EdgeMount(path="/data", volume_id="edgecerts"),)
    )
    async with DockerAdapter(adapter_config(docker_host, owner)) as adapter:
        try:
            await adapter.apply_edge(mounted)
            await serving(adapter, "front")
            first = await harness.inspect(f"{owner}_edge.front")
            creates = adapter.stats.calls_by_kind.get("POST /containers/create", 0)
            await adapter.apply_edge(mounted)  # the same plan: kept
            assert adapter.stats.calls_by_kind.get("POST /containers/create", 0) == creates
            assert (await harness.inspect(f"{owner}_edge.front"))["Id"] == first["Id"]
            assert secret not in str(first["Config"]["Labels"])
            assert [v.volume_id for v in await adapter.edge_volumes()] == ["edgecerts"]

            changed = attrs.evolve(mounted, env={"TOKEN": "other"})
            await adapter.apply_edge(changed)  # a changed plan: a new container
            await serving(adapter, "front")
            assert (await harness.inspect(f"{owner}_edge.front"))["Id"] != first["Id"]
            assert await adapter.edges() == ("front",)

            await adapter.remove_edge("front")
            await adapter.remove_edge("front")  # idempotent
            assert not (await adapter.observe_edge("front")).present
            assert await adapter.edges() == ()
            volume = await harness.docker("volume", "ls", "-q", "--filter", f"name={owner}.")
            assert f"{owner}.edgecerts" in volume.split()  # data outlives the edge
        finally:
            await harness.remove_owned(owner)


async def test_a_reopened_adapter_joins_its_edges_to_new_bundle_networks(
    docker_host: str, owner: str, harness: DockerHarness
) -> None:
    async with DockerAdapter(adapter_config(docker_host, owner)) as adapter:
        await adapter.apply_edge(edge_plan(ports=()))
        await serving(adapter, "front")
    try:
        async with DockerAdapter(adapter_config(docker_host, owner)) as reopened:
            await running(reopened, web_bundle("later"))
            address = await address_on(harness, reopened, "later", "web")
            assert await reaches(harness, f"{owner}_edge.front", address, 8080)
            # Control: a container of the same image on no bundle network reaches nothing.
            await harness.docker(
                "run", "-d", "--name", f"{owner}-outsider", "--label",
                f"io.pando.helper={owner}", BUSYBOX, "sleep", "60",
            )  # fmt: skip
            assert not answered(await fetch(harness, f"{owner}-outsider", address, 8080), PAGE)
    finally:
        await harness.remove_owned(owner)
