"""Restricted egress in effect: only the plan's rules pass, through the bundle's gateway.

The outside world is the harness's stand-ins (203.0.113.10 and .20, the metadata address, a
private host, a DNS server that logs every question). Each refusal is paired with a control
that shows the same gateway passing an allowed request, or the same target answering
another way.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from _docker_harness import DockerHarness
from _probes import (
    STAND_IN,
    address_on,
    answered,
    fetch,
    fetch_through,
    leaks_internal_lookups,
    logged_names,
    lookup_on_a_new_network,
    loopback_resolver,
    running,
    wait_logged,
    workload,
)
from pando_runtime_docker import DockerAdapter

import pando_runtime as pr

# What these tests show is the same on either backend; the kit runs on both (its streams).
pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


@pytest.fixture
def engine(request: pytest.FixtureRequest, gateway_image: str | None) -> Any:
    if gateway_image is None:
        pytest.skip("restricted egress tests need the harness's engine and its Squid image")
    return request.getfixturevalue("docker_engine")


@pytest.fixture
async def restricting_adapter(
    docker_host: str, owner: str, gateway_image: str | None, harness: DockerHarness
) -> Any:
    from _docker_tests import adapter_config  # noqa: PLC0415 - the directory's settings

    config = adapter_config(docker_host, owner, egress_gateway_image=gateway_image)
    async with DockerAdapter(config) as adapter:
        try:
            yield adapter
        finally:
            await harness.remove_owned(owner)


async def passes(harness: DockerHarness, client: str, url: str) -> None:
    """Wait until ``url`` answers through the gateway (it starts beside the workloads)."""
    with anyio.fail_after(60):
        while not answered(await fetch_through(harness, client, url), STAND_IN):  # noqa: ASYNC110
            await anyio.sleep(0.2)


def forbidden(output: str) -> bool:
    """The gateway's own refusal (403), as opposed to silence."""
    return output.startswith("HTTP/1.1 403")


# Internal networks' isolation is the engine's: each release writes its own rules.
@pytest.mark.every_engine
async def test_only_the_plans_rules_pass_the_gateway_and_raw_tcp_gets_nowhere(
    restricting_adapter: DockerAdapter, harness: DockerHarness, engine: Any
) -> None:
    adapter = restricting_adapter
    allowed_ip, other_ip = engine.outside.internet
    rules = pr.EgressPolicy(
        allow=(
            pr.EgressRule(destination=f"{allowed_ip}/32", ports=(80,)),
            pr.EgressRule(destination="other.pando.test", ports=(80,)),
            pr.EgressRule(destination="private.pando.test", ports=(80,)),
        )
    )
    plan = pr.BundlePlan(
        bundle_id="held",
        workloads=(workload("client"),),
        network=pr.NetworkPlan(egress=rules),
    )
    await running(adapter, plan)
    client = adapter.naming.container_name("held", "client")
    # Control: the CIDR rule passes (once the gateway listens).
    await passes(harness, client, f"http://{allowed_ip}/")
    # The host rule passes: the name resolves (through the gateway) to the other stand-in.
    await passes(harness, client, "http://other.pando.test/")
    # Refused by the gateway itself: an address outside the CIDR rule, a port the rule
    # does not name, the metadata address, an unlisted name, and a listed name whose address
    # is private (checked after the lookup).
    unlisted = f"unlisted-{uuid.uuid4().hex[:8]}.pando.test"
    refused = [
        f"http://{other_ip}/",
        f"http://{allowed_ip}:8080/",
        f"http://{engine.outside.metadata}/",
        f"http://{unlisted}/",
        "http://private.pando.test/",
    ]
    for url in refused:
        output = await fetch_through(harness, client, url)
        assert forbidden(output), (url, output)
    # Raw TCP gets nowhere, even to the address the CIDR rule allows through the gateway.
    assert not answered(await fetch(harness, client, allowed_ip), STAND_IN)
    # The unlisted name was never looked up, while the listed one was (the control).
    names = {q["name"] for q in engine.dns_queries()}
    assert "other.pando.test" in names
    assert unlisted not in names
    env = await harness.docker("exec", client, "sh", "-c", 'echo "$HTTPS_PROXY"')
    assert env.strip() == "http://egress.gateway:3128"


async def test_opening_and_restricting_again_switch_the_network(
    restricting_adapter: DockerAdapter, harness: DockerHarness, engine: Any
) -> None:
    adapter = restricting_adapter
    target = engine.outside.internet[0]
    bundle = f"switch{uuid.uuid4().hex[:4]}"
    closed = pr.BundlePlan(
        bundle_id=bundle,
        workloads=(workload("client"),),
        network=pr.NetworkPlan(egress=pr.EgressPolicy(allow=())),
    )
    client = adapter.naming.container_name(bundle, "client")
    await running(adapter, closed)
    network = await harness.inspect(adapter.naming.network_name(bundle))
    assert network["Internal"] is True
    assert not answered(await fetch(harness, client, target), STAND_IN)
    gateways = f"label=io.pando.egress-bundle={bundle}"
    assert (await harness.docker("ps", "-aq", "--filter", gateways)).split() == []
    opened = pr.BundlePlan(bundle_id=bundle, workloads=closed.workloads)
    await running(adapter, opened)
    network = await harness.inspect(adapter.naming.network_name(bundle))
    assert network["Internal"] is False
    assert answered(await fetch(harness, client, target), STAND_IN)
    # Re-applying the open plan makes no call at all.
    before = dict(adapter.stats.calls_by_kind)
    await adapter.apply(opened)
    assert dict(adapter.stats.calls_by_kind) == before
    await running(adapter, closed)
    assert not answered(await fetch(harness, client, target), STAND_IN)
    await adapter.destroy(pr.BundleRef(bundle))
    leftovers = await harness.docker("network", "ls", "-q", "--filter", gateways)
    assert leftovers.split() == []


async def test_a_restricted_bundle_sends_no_lookup_out_even_with_a_loopback_resolver(
    restricting_adapter: DockerAdapter, harness: DockerHarness, engine: Any, tmp_path: Path
) -> None:
    """The adapter's answer to CVE-2024-29018 on Docker 20.10: a restricted bundle's
    workloads name an unrouted upstream resolver, so the embedded DNS forwards nothing out."""
    adapter = restricting_adapter
    bundle = f"quiet{uuid.uuid4().hex[:4]}"
    kept, control = (f"{word}-{uuid.uuid4().hex[:8]}.example.org" for word in ("kept", "seen"))
    plan = pr.BundlePlan(
        bundle_id=bundle,
        workloads=(workload("client"), workload("peer")),
        network=pr.NetworkPlan(egress=pr.EgressPolicy(allow=())),
    )
    with loopback_resolver(engine, tmp_path) as log:
        await running(adapter, plan)
        client = adapter.naming.container_name(bundle, "client")
        # Control: the bundle's own names still resolve.
        peer = await harness.docker("exec", client, "nslookup", "peer")
        assert (await address_on(harness, adapter, bundle, "peer")) in peer
        await harness.docker("exec", client, "nslookup", kept, check=False)
        # Control: an internal network the adapter did not make leaks on an engine that
        # leaks (20.10); on a fixed one (28.5), a network with a route reaches the resolver.
        leaks = leaks_internal_lookups(engine)
        await lookup_on_a_new_network(harness, control, internal=leaks)
        await wait_logged(log, control)
        assert kept not in logged_names(log)
