"""Network promises in effect on real containers: ingress, default egress, the DNS limit.

Every block is paired with a control that shows the target answers: the workload another
app cannot reach answers its own app's client (and the daemon's namespace); the metadata
and private stand-ins the guard blocks answer a workload of an unguarded adapter, and the
stand-in internet answers a guarded one. The outside world is the harness's (a second
network namespace with no route anywhere), so these tests need the engine the harness
starts.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from _docker_harness import BUSYBOX, DockerHarness
from _docker_tests import adapter_config
from _probes import (
    HOST_PAGE,
    PAGE,
    SERVE,
    address_on,
    answered,
    fetch,
    host_service,
    leaks_internal_lookups,
    logged_names,
    lookup_on_a_new_network,
    loopback_resolver,
    probe,
    running,
    wait_logged,
    workload,
)
from pando_runtime_docker import DockerAdapter
from pando_runtime_docker.manifests import private_chain

import pando_runtime as pr

# What these tests show is the same on either backend; the kit runs on both (its streams).
pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


# -- ingress ---------------------------------------------------------------------------------


# Isolation between apps rests on the engine's own rules, which each release lays out its own way.
@pytest.mark.every_engine
async def test_another_app_cannot_connect_while_its_own_app_and_the_host_can(
    docker_adapter: DockerAdapter, harness: DockerHarness, engine: Any
) -> None:
    app = pr.BundlePlan(
        bundle_id="ingress-app",
        workloads=(workload("web", SERVE), workload("client")),
    )
    other = pr.BundlePlan(bundle_id="ingress-other", workloads=(workload("intruder"),))
    await running(docker_adapter, app, other)
    naming = docker_adapter.naming
    address = await address_on(harness, docker_adapter, "ingress-app", "web")
    client = naming.container_name("ingress-app", "client")
    intruder = naming.container_name("ingress-other", "intruder")
    # Control: the app's own client reaches web by its alias, and by its address.
    with anyio.fail_after(30):
        while not answered(await fetch(harness, client, "web", 8080), PAGE):  # noqa: ASYNC110
            await anyio.sleep(0.2)
    assert answered(await fetch(harness, client, address, 8080), PAGE)
    # Another app's container gets nothing: not by address, and the alias does not resolve.
    assert not answered(await fetch(harness, intruder, address, 8080), PAGE)
    assert not answered(await fetch(harness, intruder, "web", 8080), PAGE)
    # The daemon's own namespace (upstream, address mode) reaches the container's address.
    with engine.connect(address, 8080) as sock:
        sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
        reply = b"".join(iter(lambda: sock.recv(65536), b"")).decode()
    assert answered(reply, PAGE)


# -- default egress --------------------------------------------------------------------------


async def test_unguarded_default_egress_reaches_the_metadata_and_private_stand_ins(
    docker_adapter: DockerAdapter, harness: DockerHarness, engine: Any
) -> None:
    """Without ``egress_guard_image`` the adapter blocks nothing (the documented default)."""
    plan = pr.BundlePlan(bundle_id="open-egress", workloads=(workload("web"),))
    await running(docker_adapter, plan)
    name = docker_adapter.naming.container_name("open-egress", "web")
    outside = engine.outside
    for address in (outside.internet[0], outside.metadata, outside.private):
        output = await fetch(harness, name, address)
        assert answered(output, "pando stand-in outside"), (address, output)
    with host_service(engine) as port:
        output = await fetch(harness, name, engine.network.engine_ip, port)
        assert answered(output, HOST_PAGE), output


# The guard's rules hang off DOCKER-USER, in a FORWARD chain each release lays out its own way.
@pytest.mark.every_engine
async def test_the_guard_blocks_metadata_and_private_ranges_and_the_internet_answers(  # noqa: PLR0917 - fixtures
    docker_host: str,
    owner: str,
    harness: DockerHarness,
    engine: Any,
    guard_image: str,
    remove_guard_rules: list[str],
) -> None:
    config = adapter_config(docker_host, owner, egress_guard_image=guard_image)
    outside = engine.outside
    async with DockerAdapter(config) as adapter:
        assert adapter.egress_guard is not None
        remove_guard_rules.extend([adapter.egress_guard.chain, adapter.egress_guard.host_chain])
        remove_guard_rules.extend(private_chain(owner, b) for b in ("guarded", "guarded-two"))
        try:
            plan = pr.BundlePlan(
                bundle_id="guarded",
                workloads=(
                    pr.WorkloadPlan(
                        name="web",
                        image=BUSYBOX,
                        command=SERVE,
                        ports=(pr.Port(8080),),
                        exposed=True,  # the guard declares private_network: the host dials it
                    ),
                    workload("client"),
                ),
            )
            second = pr.BundlePlan(bundle_id="guarded-two", workloads=(workload("web"),))
            await running(adapter, plan, second)
            client = adapter.naming.container_name("guarded", "client")
            # Control: the stand-in internet answers, and so does the bundle's own web
            # (its address is in 10.0.0.0/8, like the private stand-in).
            assert answered(await fetch(harness, client, outside.internet[0]), "stand-in")
            web = await address_on(harness, adapter, "guarded", "web")
            assert web.startswith("10.")
            assert answered(await fetch(harness, client, web, 8080), PAGE)
            for blocked in (outside.metadata, outside.private):
                output = await fetch(harness, client, blocked)
                assert not answered(output, "stand-in"), (blocked, output)
            # Nor does a service of the daemon's own namespace (the unguarded test's
            # control reaches it), while the host still dials the workload (upstream).
            with host_service(engine) as port:
                output = await fetch(harness, client, engine.network.engine_ip, port)
                assert not answered(output, HOST_PAGE), output
            with engine.connect(web, 8080) as sock:
                sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
                reply = b"".join(iter(lambda: sock.recv(65536), b"")).decode()
            assert answered(reply, PAGE)
            # The daemon's namespace (not the bundle) still reaches them: only bundles are held.
            assert engine.namespace_reaches(outside.metadata)
            # One jump, however many bundles were applied.
            rules = engine.run_in_netns(["iptables", "-w", "-S", "DOCKER-USER"]).stdout
            jumps = [
                r for r in rules.splitlines() if r.endswith(f"-j {adapter.egress_guard.chain}")
            ]
            assert len(jumps) == 1, rules
            helpers = await harness.docker(
                "ps", "-aq", "--filter", f"label=io.pando.egress-guard={owner}"
            )
            assert helpers.split() == [], "the helper container is removed after its run"
        finally:
            await harness.remove_owned(owner)


async def test_a_guard_that_cannot_run_stops_the_apply_before_anything_is_written(
    docker_host: str, owner: str, harness: DockerHarness, engine: Any
) -> None:
    absent = f"127.0.0.1:9/pando-absent/iptables:{uuid.uuid4().hex[:6]}"
    config = adapter_config(docker_host, owner, egress_guard_image=absent)
    async with DockerAdapter(config) as adapter:
        try:
            plan = pr.BundlePlan(bundle_id="unguarded", workloads=(workload("web"),))
            with pytest.raises(pr.AdapterFailed) as caught:
                await adapter.apply(plan)
            assert caught.value.code
            assert "egress_guard_image" in (caught.value.remedy or "")
            assert not (await adapter.observe(pr.BundleRef("unguarded"))).exists
            label = f"label=io.pando.owner={owner}"
            assert (await harness.docker("network", "ls", "-q", "--filter", label)).split() == []
        finally:
            await harness.remove_owned(owner)


# -- the DNS limit ---------------------------------------------------------------------------


async def test_an_internal_network_sends_no_lookup_out_when_the_resolver_is_not_on_loopback(
    harness: DockerHarness, engine: Any
) -> None:
    """What Docker 20.10's embedded DNS does for an ``internal`` network here: it forwards an
    outside name from the container's own namespace, which has no route, so nothing leaves.

    CVE-2024-29018 is the other case, not reproduced here: when the daemon's resolver is on
    a loopback address, 20.10 forwards from the daemon's namespace and the name leaks (fixed
    in 23.0.11, 25.0.5 and 26.0). docs/docker.md states it as a limit.
    """
    network = f"pando-leak-{uuid.uuid4().hex[:8]}"
    kept, control = (f"{word}-{uuid.uuid4().hex[:8]}.example.org" for word in ("kept", "seen"))
    await harness.docker("network", "create", "--internal", network)
    try:
        raw = await harness.docker(
            "run", "--rm", "--pull", "never", "--network", network, BUSYBOX,
            *probe(engine.outside.internet[0]), check=False,
        )  # fmt: skip
        assert not answered(raw, "stand-in"), raw
        await harness.docker(
            "run", "--rm", "--pull", "never", "--network", network, BUSYBOX,
            "nslookup", kept, check=False,
        )  # fmt: skip
        # Control: the same lookup from a network with a route reaches the stand-in server,
        # after the first one ended.
        await lookup_on_a_new_network(harness, control, internal=False)
        with anyio.fail_after(30):
            while control not in {q["name"] for q in engine.dns_queries()}:  # noqa: ASYNC110
                await anyio.sleep(0.1)
        assert kept not in {q["name"] for q in engine.dns_queries()}
    finally:
        await harness.docker("network", "rm", network, check=False)


async def test_an_internal_network_leaks_lookups_when_the_resolver_is_on_loopback(
    harness: DockerHarness, engine: Any, tmp_path: Path
) -> None:
    """CVE-2024-29018 on Docker 20.10: with the daemon's resolver on loopback, the embedded
    DNS forwards an internal network's lookups from the daemon's namespace, and they leave.
    A fixed engine (28.5) keeps them in."""
    leaked, control = (f"{word}-{uuid.uuid4().hex[:8]}.example.org" for word in ("leak", "seen"))
    with loopback_resolver(engine, tmp_path) as log:
        await lookup_on_a_new_network(harness, leaked, internal=True)
        if leaks_internal_lookups(engine):
            await wait_logged(log, leaked)
        else:
            # Control: a network with a route reaches the resolver, after the first ended.
            await lookup_on_a_new_network(harness, control, internal=False)
            await wait_logged(log, control)
            assert leaked not in logged_names(log)
