"""An engine with no firewall the adapter's rules can use: dockerd run with ``--iptables=false``,
on each release of ``--docker-engines`` (28.5 names its firewall in ``/info``; 20.10 cannot,
and the guard's own check finds it out).

The egress guard (``egress_guard_image``) finds no ``DOCKER-USER`` and says so: the first
apply, the health check and from then on ``check_plan`` refuse with the firewall named and a
remedy about the daemon's firewall (not the guard image's iptables), nothing written; private
networks and restricted egress are no longer declared. Without the guard everything else
works, and apps reach each other (Docker's isolation of one network from another is its
firewall's), which without the guard the adapter cannot tell.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from _docker_harness import DockerHarness
from _docker_tests import adapter_config, running, until, workload
from _probes import PAGE, SERVE, address_on, answered, fetch
from _probes import running as all_running
from _probes import workload as probe_workload
from localdocker import IPTABLES, iptables_image
from localdocker.engines import DEBIAN, built_version
from localdocker.pytest_plugin import open_engine, releases
from pando_runtime_docker import DockerAdapter

import pando_runtime as pr

# Nothing here differs between the backends.
pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


@pytest.fixture(scope="module", params=[built_version(), DEBIAN])
def no_firewall_engine(request: pytest.FixtureRequest) -> Iterator[Any]:
    """An engine of its own (of each release) that writes no iptables rules, the guard's
    image loaded."""
    release = str(request.param)
    if release not in releases(request.config):
        pytest.skip(f"Docker Engine {release} is not among --docker-engines")
    engine: Any = open_engine(
        request,
        f"docker{release}-no-firewall",
        daemon_flags=("--iptables=false",),
        release=release,
    )
    try:
        engine.load_image(iptables_image().archive)
        yield engine
    finally:
        engine.close()


@pytest.fixture
def no_firewall_host(no_firewall_engine: Any) -> str:
    return f"unix://{no_firewall_engine.socket_path}"


def refused_for_the_firewall(error: pr.AdapterFailed) -> None:
    assert "--iptables=false" in error.message, error.message
    assert error.details["firewall"] == "none"
    remedy = error.remedy or ""
    assert "iptables firewall" in remedy, remedy
    assert "egress_guard_image" in remedy, remedy
    assert "matches the host's" not in remedy  # not the guard image's backend


async def test_the_guard_refuses_every_plan_naming_the_firewall(
    no_firewall_host: str, owner: str
) -> None:
    config = adapter_config(
        no_firewall_host,
        owner,
        egress_guard_image=IPTABLES,
        egress_gateway_image="pando.test/squid:never-pulled",
    )
    plan = pr.BundlePlan(bundle_id="guarded", workloads=(workload("web"),))
    harness = DockerHarness(no_firewall_host)
    try:
        async with DockerAdapter(config) as adapter:
            assert (await adapter.capabilities()).private_network  # not known yet
            with pytest.raises(pr.AdapterFailed) as first:
                await adapter.apply(plan)  # the guard's own check finds no DOCKER-USER
            refused_for_the_firewall(first.value)
            assert not (await adapter.observe(pr.BundleRef("guarded"))).exists
            caps = await adapter.capabilities()
            assert not caps.private_network
            assert not caps.egress_restriction
            with pytest.raises(pr.AdapterFailed) as again:
                await adapter.check_plan(plan)
            refused_for_the_firewall(again.value)
        async with DockerAdapter(config) as fresh:
            with pytest.raises(pr.AdapterFailed) as health:
                await fresh.health_check()  # before any apply: the guard's check, alone
            refused_for_the_firewall(health.value)
        listed = await harness.docker("ps", "-aq", "--filter", f"label=pando.owner={owner}")
        assert not listed.split()
    finally:
        await harness.remove_owned(owner)


async def test_without_the_guard_everything_else_works(no_firewall_host: str, owner: str) -> None:
    plan = pr.BundlePlan(bundle_id="plain", workloads=(workload("web"),))
    try:
        async with DockerAdapter(adapter_config(no_firewall_host, owner)) as adapter:
            await adapter.health_check()
            await adapter.apply(plan)
            await until(adapter, "plain", running, "the app to run without a firewall")
            await adapter.destroy(pr.BundleRef("plain"))
    finally:
        await DockerHarness(no_firewall_host).remove_owned(owner)


async def test_without_a_firewall_apps_reach_each_other(no_firewall_host: str, owner: str) -> None:
    """What no setting brings back (docs/docker.md): Docker's isolation of one app's network
    from another's is its firewall's. Nothing tells the adapter without the guard: ``/info``
    names ``iptables`` on 28.5 even so, and 20.10 names nothing."""
    app = pr.BundlePlan(bundle_id="open-app", workloads=(probe_workload("web", SERVE),))
    other = pr.BundlePlan(bundle_id="open-other", workloads=(probe_workload("intruder"),))
    harness = DockerHarness(no_firewall_host)
    try:
        async with DockerAdapter(adapter_config(no_firewall_host, owner)) as adapter:
            await adapter.health_check()
            await all_running(adapter, app, other)
            address = await address_on(harness, adapter, "open-app", "web")
            intruder = adapter.naming.container_name("open-other", "intruder")
            # What Docker's rules refuse on an engine with them (test_docker_network's
            # isolation test): another app's container reaches the app by address.
            with anyio.fail_after(30):
                while not answered(await fetch(harness, intruder, address, 8080), PAGE):  # noqa: ASYNC110
                    await anyio.sleep(0.2)
    finally:
        await harness.remove_owned(owner)
