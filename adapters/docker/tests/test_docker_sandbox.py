"""Sandboxed apps on a real engine: gVisor's ``runsc`` beside runc, in effect.

The harness's engine has ``runsc`` (gVisor built from its Go module, its own network stack)
among its runtimes; the adapter's ``sandbox_runtime`` names it. What is shown from inside:
the sandboxed app's kernel is gVisor's (``uname -r``, ``dmesg``), an ordinary app's beside it
the host's; exec, logs and usage work through the sandbox; the network's promises hold for
it; and what gVisor's network stack loses (the embedded DNS) is shown lost. Exits and OOM kills
under the sandbox are the conformance kit's (its trio run is sandboxed).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from _docker_harness import BUSYBOX, DockerHarness
from _docker_tests import adapter_config
from _probes import (
    PAGE,
    SERVE,
    STAND_IN,
    address_on,
    answered,
    fetch,
    proxied,
    running,
    workload,
)
from _socket_proxy import SocketProxy
from pando_runtime_docker import DockerAdapter
from pando_runtime_docker.manifests import private_chain

import pando_runtime as pr

# What these tests show is the same on either backend.
pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

SANDBOXED = pr.IsolationClass.SANDBOXED


@pytest.fixture
async def sandboxing(
    docker_host: str, owner: str, gvisor_runtime: str, harness: DockerHarness
) -> AsyncIterator[DockerAdapter]:
    """An adapter whose sandboxed plans run under gVisor, the others under runc."""
    config = adapter_config(docker_host, owner, sandbox_runtime=gvisor_runtime)
    async with DockerAdapter(config) as adapter:
        try:
            yield adapter
        finally:
            await harness.remove_owned(owner)


async def _run(adapter: DockerAdapter, bundle: str, *command: str) -> str:
    result = await adapter.run(pr.WorkloadRef(bundle, "app"), pr.ExecRequest(command=command))
    assert result.ok, result
    return result.stdout.decode()


# The runtime is the daemon's to pick from its configuration: each release reads it.
@pytest.mark.every_engine
async def test_a_sandboxed_app_runs_on_gvisors_kernel_and_an_ordinary_one_on_the_hosts(
    sandboxing: DockerAdapter, harness: DockerHarness, gvisor_runtime: str
) -> None:
    adapter = sandboxing
    caps = await adapter.capabilities()
    assert caps.isolation_class is SANDBOXED
    # A sandbox cannot be looked into: trials observe neither ports nor writes.
    assert not caps.port_observation
    assert not caps.write_observation
    await adapter.health_check()
    hello = ("sh", "-c", "echo hello from inside; exec sleep 600")
    sandboxed = pr.BundlePlan(
        bundle_id="sandboxed", workloads=(workload("app", hello),), isolation=SANDBOXED
    )
    ordinary = pr.BundlePlan(bundle_id="ordinary", workloads=(workload("app", hello),))
    await running(adapter, sandboxed, ordinary)
    runtimes = {
        bundle: (await harness.inspect(adapter.naming.container_name(bundle, "app")))["HostConfig"][
            "Runtime"
        ]
        for bundle in ("sandboxed", "ordinary")
    }
    assert runtimes == {"sandboxed": gvisor_runtime, "ordinary": "runc"}
    # In effect: exec reaches each app's own kernel.
    assert "gvisor" in await _run(adapter, "sandboxed", "uname", "-r")
    assert "gVisor" in await _run(adapter, "sandboxed", "dmesg")
    assert (await _run(adapter, "ordinary", "uname", "-r")).strip() == os.uname().release
    # Logs and usage come through the sandbox as through runc.
    async with adapter.logs(pr.WorkloadRef("sandboxed", "app")) as stream:
        with anyio.fail_after(30):
            log = b""
            while b"hello from inside" not in log:
                log += await stream.receive()
    usage = await adapter.usage(pr.BundleRef("sandboxed"))
    (app,) = usage.workloads
    assert app.running
    assert app.memory_bytes > 0


async def test_a_sandboxed_trial_runs_under_gvisor_and_reports_no_ports_or_writes(
    sandboxing: DockerAdapter,
) -> None:
    command = ("sh", "-c", "uname -r; echo x > /written; exec httpd -f -p 8080")
    request = pr.TrialRequest(
        trial_id="sandboxed", image=BUSYBOX, command=command, timeout_seconds=3,
        isolation_floor=SANDBOXED,
    )  # fmt: skip
    result = await sandboxing.trial(request)
    assert result.started
    assert b"gvisor" in result.log
    assert result.exit_code is None  # the server was still up
    assert result.observed_ports == ()  # not observed, as the capabilities say
    assert result.observed_writes == ()


async def test_the_health_check_names_the_runtimes_the_daemon_has(
    docker_host: str, owner: str, gvisor_runtime: str
) -> None:
    config = adapter_config(docker_host, owner, oci_runtime="kata-absent")
    async with DockerAdapter(config) as adapter:
        assert (await adapter.capabilities()).isolation_class is SANDBOXED
        with pytest.raises(pr.AdapterFailed) as caught:
            await adapter.health_check()
    message = caught.value.message
    assert "'kata-absent'" in message
    assert "runc" in message
    assert gvisor_runtime in message


@pytest.fixture
async def runtime_ignored(docker_host: str, gvisor_runtime: str) -> AsyncIterator[SocketProxy]:
    """A proxy in front of the real daemon that turns every ``runsc`` into ``runc`` on the
    way: to the adapter, an engine that accepted the runtime and made an ordinary container."""
    asked, made = f'"{gvisor_runtime}"'.encode(), b'"runc"'
    folder = Path(tempfile.mkdtemp(prefix="pdx", dir="/tmp"))
    try:
        proxy = SocketProxy(
            folder / "d.sock",
            Path(docker_host.removeprefix("unix://")),
            rewrite=lambda data: data.replace(asked, made.ljust(len(asked))),
        )
        async with proxy.running():
            yield proxy
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def test_an_engine_that_ignores_the_runtime_is_caught_and_nothing_is_left(
    runtime_ignored: SocketProxy, owner: str, gvisor_runtime: str, harness: DockerHarness
) -> None:
    config = adapter_config(runtime_ignored.host, owner, sandbox_runtime=gvisor_runtime)
    try:
        async with DockerAdapter(config) as adapter:
            plan = pr.BundlePlan(
                bundle_id="ignored", workloads=(workload("app"),), isolation=SANDBOXED
            )
            with pytest.raises(pr.AdapterFailed, match="ignored the runtime"):
                await adapter.apply(plan)
            trial = pr.TrialRequest(trial_id="ignored", image=BUSYBOX, isolation_floor=SANDBOXED)
            with pytest.raises(pr.AdapterFailed, match="ignored the runtime"):
                await adapter.trial(trial)
            # Control: an ordinary plan asks for no runtime and runs.
            plain = pr.BundlePlan(bundle_id="plain", workloads=(workload("app"),))
            await running(adapter, plain)
        for key, kept in (("owner", "plain"), ("helper", None)):
            label = f"label=io.pando.{key}={owner}"
            names = ("--format", "{{.Names}}", "--filter", label)
            left = (await harness.docker("ps", "-a", *names)).split()
            assert left == ([adapter.naming.container_name(kept, "app")] if kept else [])
            names = ("--format", "{{.Name}}", "--filter", label)
            networks = (await harness.docker("network", "ls", *names)).split()
            assert networks == ([adapter.naming.network_name(kept)] if kept else [])
    finally:
        await harness.remove_owned(owner)


async def test_the_network_holds_for_a_sandboxed_app_and_names_are_lost(  # noqa: PLR0917 - fixtures
    docker_host: str,
    owner: str,
    gvisor_runtime: str,
    harness: DockerHarness,
    engine: Any,
    guard_image: str,
    gateway_image: str,
    remove_guard_rules: list[str],
) -> None:
    """Another app cannot reach a sandboxed one by address; the guard keeps metadata and
    private ranges closed to it; restricted egress passes only its rules (through the
    gateway's address: its name, as the app's own, does not resolve under gVisor's network
    stack, which cannot reach the daemon's embedded DNS)."""
    config = adapter_config(
        docker_host,
        owner,
        sandbox_runtime=gvisor_runtime,
        egress_guard_image=guard_image,
        egress_gateway_image=gateway_image,
    )
    outside = engine.outside
    allowed, other = outside.internet
    async with DockerAdapter(config) as adapter:
        assert adapter.egress_guard is not None
        remove_guard_rules.extend([adapter.egress_guard.chain, adapter.egress_guard.host_chain])
        remove_guard_rules.extend(private_chain(owner, b) for b in ("sbx", "intruder", "held"))
        try:
            web = pr.WorkloadPlan(
                name="web", image=BUSYBOX, command=SERVE, ports=(pr.Port(8080),), exposed=True
            )
            app = pr.BundlePlan(
                bundle_id="sbx", workloads=(web, workload("client")), isolation=SANDBOXED
            )
            intruder = pr.BundlePlan(bundle_id="intruder", workloads=(workload("app"),))
            rules = pr.EgressPolicy(allow=(pr.EgressRule(destination=f"{allowed}/32"),))
            held = pr.BundlePlan(
                bundle_id="held",
                workloads=(workload("client"),),
                network=pr.NetworkPlan(egress=rules),
                isolation=SANDBOXED,
            )
            await running(adapter, app, intruder, held)
            naming = adapter.naming
            client = naming.container_name("sbx", "client")
            address = await address_on(harness, adapter, "sbx", "web")
            # Control: the app's own (sandboxed) client reaches web by address, and the host
            # (the daemon's namespace) too.
            with anyio.fail_after(30):
                while not answered(await fetch(harness, client, address, 8080), PAGE):  # noqa: ASYNC110
                    await anyio.sleep(0.2)
            with engine.connect(address, 8080) as sock:
                sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
                assert answered(b"".join(iter(lambda: sock.recv(65536), b"")).decode(), PAGE)
            # Another app (under runc) gets nothing from it.
            stranger = naming.container_name("intruder", "app")
            assert not answered(await fetch(harness, stranger, address, 8080), PAGE)
            # The guard: the stand-in internet answers the sandbox, metadata and private don't.
            assert answered(await fetch(harness, client, allowed), STAND_IN)
            for blocked in (outside.metadata, outside.private):
                assert not answered(await fetch(harness, client, blocked), STAND_IN), blocked
            # Lost under gVisor's network stack: the names the embedded DNS would answer.
            assert not answered(await fetch(harness, client, "web", 8080), PAGE)
            # Restricted egress: raw TCP gets nowhere; the gateway (by its address) passes
            # the rule alone.
            held_client = naming.container_name("held", "client")
            assert not answered(await fetch(harness, held_client, allowed), STAND_IN)
            gateway = await _gateway_address(harness, adapter, "held")

            async def through(url: str) -> str:
                argv = proxied(url, proxy=f"{gateway}:3128")
                return await harness.docker("exec", held_client, *argv, check=False)

            with anyio.fail_after(60):
                while not answered(await through(f"http://{allowed}/"), STAND_IN):  # noqa: ASYNC110
                    await anyio.sleep(0.2)
            refused = await through(f"http://{other}/")
            assert refused.startswith("HTTP/1.1 403"), refused
        finally:
            await harness.remove_owned(owner)


async def _gateway_address(harness: DockerHarness, adapter: DockerAdapter, bundle: str) -> str:
    network = adapter.naming.network_name(bundle)
    data = await harness.inspect(network)
    for container in (data.get("Containers") or {}).values():
        if "gateway" in container["Name"]:
            return str(container["IPv4Address"]).split("/")[0]
    msg = f"no gateway on {network}: {data.get('Containers')}"
    raise AssertionError(msg)
