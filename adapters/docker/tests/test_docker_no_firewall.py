"""An engine with no firewall the adapter's rules can use: dockerd run with ``--iptables=false``.

The egress guard (``egress_guard_image``) finds no ``DOCKER-USER`` and says so: the first
apply, the health check and from then on ``check_plan`` refuse with the firewall named and a
remedy about the daemon's firewall (not the guard image's iptables), nothing written; private
networks and restricted egress are no longer declared. Without the guard everything else works.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from _docker_harness import DockerHarness
from _docker_tests import adapter_config, running, until, workload
from localdocker import IPTABLES, iptables_image
from localdocker.pytest_plugin import open_engine
from pando_runtime_docker import DockerAdapter

import pando_runtime as pr

# Nothing here differs between the backends.
pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


@pytest.fixture(scope="module")
def no_firewall_host(request: pytest.FixtureRequest) -> Iterator[str]:
    """An engine of its own that writes no iptables rules, the guard's image loaded."""
    engine: Any = open_engine(request, "docker-no-firewall", daemon_flags=("--iptables=false",))
    try:
        engine.load_image(iptables_image().archive)
        yield f"unix://{engine.socket_path}"
    finally:
        engine.close()


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
