"""Where the host dials a workload (both upstream modes), and a daemon restarted mid-watch.

These need the harness's own engine (``docker_engine``): its namespace to dial from, and a
daemon it can restart.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _docker_harness import BUSYBOX, DockerHarness
from _docker_tests import adapter_config
from _socket_proxy import SocketProxy
from pando_runtime_docker import DockerAdapter

import pando_runtime as pr

pytestmark = pytest.mark.anyio

INDEX = b"hello from the upstream\n"
HTTPD = ("httpd", "-f", "-p", "8080", "-h", "/www")
SLEEP = ("sh", "-c", "trap 'exit 143' TERM; while :; do sleep 0.2; done")


def web_plan(bundle_id: str) -> pr.BundlePlan:
    web = pr.WorkloadPlan(
        name="web",
        image=BUSYBOX,
        command=HTTPD,
        ports=(pr.Port(8080),),
        files=(pr.CarriedFile("/www/index.html", INDEX),),
    )
    return pr.BundlePlan(bundle_id=bundle_id, workloads=(web,))


async def running(adapter: DockerAdapter, bundle_id: str) -> pr.ObservedBundle:
    with anyio.fail_after(60):
        while True:
            observed = await adapter.observe(pr.BundleRef(bundle_id))
            if observed.all_running and observed.workloads:
                return observed
            await anyio.sleep(0.1)


def http_get(engine: Any, host: str, port: int) -> bytes:
    """GET / from the engine's namespace, where a host beside the daemon runs."""
    with engine.connect(host, port) as conn:
        conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
        conn.settimeout(10)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    return data


def get_line(host: str, port: int) -> str:
    """A shell line for a busybox container: GET / from ``host:port`` through ``nc``."""
    return f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {host} {port}"


async def served(harness: DockerHarness, container: str, host: str, port: int) -> None:
    """Wait until ``container`` gets the index from ``host:port`` (running is not listening)."""
    with anyio.fail_after(30):
        while INDEX.decode() not in await harness.docker(  # noqa: ASYNC110 - polls the server
            "exec", container, "sh", "-c", get_line(host, port), check=False
        ):
            await anyio.sleep(0.05)


def split(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").rpartition(":")
    return host, int(port)


async def test_address_mode_names_the_containers_address_on_its_network(
    docker_engine: Any, owner: str, harness: DockerHarness
) -> None:
    host = f"unix://{docker_engine.socket_path}"
    async with DockerAdapter(adapter_config(host, owner)) as adapter:
        try:
            ref = pr.WorkloadRef("upaddr", "web")
            before = adapter.upstream(ref, 8080)
            await adapter.apply(web_plan("upaddr"))
            await running(adapter, "upaddr")
            upstream = adapter.upstream(ref, 8080)
            address, port = split(upstream.url)
            inspected = await harness.inspect(adapter.naming.container_name("upaddr", "web"))
            networks = inspected["NetworkSettings"]["Networks"]
            assert address == networks[adapter.naming.network_name("upaddr")]["IPAddress"]
            assert before.url != upstream.url  # before the container: only its name is known
            answer = b""
            with anyio.fail_after(30):  # running is not listening yet: poll the server itself
                while not answer:
                    try:
                        answer = await anyio.to_thread.run_sync(
                            http_get, docker_engine, address, port
                        )
                    except ConnectionRefusedError:
                        await anyio.sleep(0.05)
            assert INDEX in answer
            # Control: the same address on a port nothing serves is refused.
            with pytest.raises(ConnectionRefusedError):
                await anyio.to_thread.run_sync(http_get, docker_engine, address, 8081)
        finally:
            await harness.remove_owned(owner)


async def test_proxy_container_mode_joins_the_hosts_container_to_each_bundle_network(
    docker_engine: Any, owner: str, harness: DockerHarness
) -> None:
    host = f"unix://{docker_engine.socket_path}"
    proxy = f"{owner}-host"
    await harness.docker("run", "-d", "--name", proxy, BUSYBOX, *SLEEP)
    config = adapter_config(host, owner, upstream_mode="proxy_container", proxy_container=proxy)
    other_owner = f"{owner}x"
    try:
        async with (
            DockerAdapter(config) as adapter,
            DockerAdapter(adapter_config(host, other_owner)) as other,
        ):
            await adapter.apply(web_plan("upproxy"))
            await other.apply(web_plan("upother"))
            await running(adapter, "upproxy")
            await running(other, "upother")
            hostname, port = split(adapter.upstream(pr.WorkloadRef("upproxy", "web"), 8080).url)
            assert hostname == adapter.naming.container_name("upproxy", "web")
            await served(harness, proxy, hostname, port)
            # Control: a bundle of an adapter without the proxy setting serves (asked from its
            # own container) but is not on the host container's networks.
            elsewhere = other.naming.container_name("upother", "web")
            await served(harness, elsewhere, "127.0.0.1", 8080)
            missed = await harness.docker(
                "exec", proxy, "sh", "-c", get_line(elsewhere, 8080), check=False
            )
            assert INDEX.decode() not in missed
            await adapter.destroy(pr.BundleRef("upproxy"))  # leaves the network first
            assert not (await adapter.observe(pr.BundleRef("upproxy"))).exists
    finally:
        await harness.docker("rm", "-f", proxy, check=False)
        await harness.remove_owned(owner)
        await harness.remove_owned(other_owner)


async def test_a_daemon_restarted_mid_watch_is_missed_then_resynced_without_duplicates(
    docker_engine: Any, owner: str, harness: DockerHarness
) -> None:
    host = f"unix://{docker_engine.socket_path}"
    plan = pr.BundlePlan(
        bundle_id="restart",
        workloads=(pr.WorkloadPlan(name="web", image=BUSYBOX, command=SLEEP),),
    )
    async with DockerAdapter(adapter_config(host, owner, cache_max_staleness=60)) as adapter:
        try:
            await adapter.apply(plan)
            first = await running(adapter, "restart")
            relists = adapter.cache.relists
            async with adapter.watch_bundles() as events:
                watching = await anext(events)
                assert watching.kind is pr.BundleEventKind.WATCHING
                await anyio.to_thread.run_sync(docker_engine.restart)
                kinds: list[pr.BundleEventKind] = []
                with anyio.fail_after(60):
                    async for event in events:
                        kinds.append(event.kind)
                        if event.kind is pr.BundleEventKind.MISSED:
                            break
            assert adapter.cache.relists > relists, "the view was listed again"
            after = await adapter.observe(pr.BundleRef("restart"))
            assert not after.workload("web").running  # the restart stopped it: no gap hides it
            await adapter.apply(plan)
            again = await running(adapter, "restart")
            assert again.workload("web").instance_id != first.workload("web").instance_id
            label = f"label=io.pando.owner={owner}"
            assert len((await harness.docker("ps", "-aq", "--filter", label)).split()) == 1
        finally:
            await harness.remove_owned(owner)


async def test_a_connection_lost_mid_apply_leaves_no_duplicate_once_applied_again(
    docker_host: str, owner: str, harness: DockerHarness, engine_proxy: SocketProxy | None
) -> None:
    if engine_proxy is None:
        pytest.skip("the engine is not on a unix socket the test can proxy")
    db = pr.WorkloadPlan(
        name="db",
        image=BUSYBOX,
        command=SLEEP,
        health=pr.HealthCheck(command=("true",), interval_seconds=1),
    )
    api = pr.WorkloadPlan(name="api", image=BUSYBOX, command=SLEEP, depends_on=("db",))
    plan = pr.BundlePlan(bundle_id="midapply", workloads=(api, db))
    label = f"label=io.pando.owner={owner}"
    async with DockerAdapter(adapter_config(engine_proxy.host, owner)) as adapter:
        try:
            outcome: list[BaseException | None] = []

            async def apply() -> None:
                try:
                    await adapter.apply(plan)
                except pr.AdapterUnavailable as error:
                    outcome.append(error)
                else:
                    outcome.append(None)

            async with anyio.create_task_group() as group:
                group.start_soon(apply)
                # While apply waits for db's first health check, cut the connection.
                with anyio.fail_after(60):
                    while not (await harness.docker("ps", "-q", "--filter", label)).split():  # noqa: ASYNC110
                        await anyio.sleep(0.05)
                engine_proxy.cut()
                with anyio.fail_after(60):
                    while adapter.cache.connected:  # noqa: ASYNC110 - the adapter's real state
                        await anyio.sleep(0.02)
                engine_proxy.restore()
            assert len(outcome) == 1  # it finished, one way or the other
            await adapter.apply(plan)
            observed = await running(adapter, "midapply")
            assert {w.name for w in observed.workloads} == {"api", "db"}
            names = await harness.docker("ps", "-a", "--format", "{{.Names}}", "--filter", label)
            assert sorted(names.split()) == sorted(
                adapter.naming.container_name("midapply", w) for w in ("api", "db")
            )
        finally:
            await harness.remove_owned(owner)
