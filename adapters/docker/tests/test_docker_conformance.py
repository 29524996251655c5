"""The Docker adapter passes the conformance kit on a real Docker Engine, asyncio and trio.
The trio run is sandboxed: the adapter's ``sandbox_runtime`` is gVisor's ``runsc`` and every
plan of the kit asks for the sandboxed class (what differs between the backends is the same
either way, and a third whole run would cost about two minutes).

Over TLS and over SSH the kit runs once, through a fleet of an engine reached each way
(``test_docker_fleet_remote.py``): its apps are spread over both members, and its hooks cut
each way in.

The harness's hooks act on real containers (see ``_docker_harness``); the adapter reaches the
engine through a proxy of its own (``_socket_proxy``), with a cache bound of 2 s: the stale-cache
and event-gap hooks cut that proxy, so the adapter's event stream really ends while the engine
serves every other client. Every capability the adapter declares is tested, and the kit checks
that the rest raise ``CapabilityUnsupported``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
from _docker_harness import DockerHarness
from _docker_tests import ENV_HOST, adapter_config
from _socket_proxy import SocketProxy
from pando_runtime_docker import DockerAdapter

from pando_runtime import IsolationClass
from pando_runtime.testing.conformance import ConformanceHarness, ConformanceSuite


@contextlib.asynccontextmanager
async def kit_adapter(
    reach: dict[str, Any],
    owner: str,
    gateway_image: str | None,
    engine_host: str,
    **more: Any,
) -> AsyncIterator[DockerAdapter]:
    """An adapter reaching the engine as ``reach`` says, with the kit's quick bounds; what its
    owner made is removed through ``engine_host`` at the end."""
    config = adapter_config(
        **reach,
        owner=owner,
        # A bound 2.5 s above the probe's interval: a ping slowed by a busy machine is no outage.
        cache_max_staleness=3.0,
        cache_probe_interval=0.5,
        egress_gateway_image=gateway_image,
        **more,
    )
    try:
        async with DockerAdapter(config) as adapter:
            yield adapter
    finally:
        await DockerHarness(engine_host).remove_owned(owner)


class TestDockerConformance(ConformanceSuite):
    @pytest.fixture
    def sandbox(self, anyio_backend: str, request: pytest.FixtureRequest) -> dict[str, str]:
        """On trio, gVisor's runtime as the adapter's ``sandbox_runtime``."""
        if anyio_backend != "trio":
            return {}
        return {"sandbox_runtime": request.getfixturevalue("gvisor_runtime")}

    @pytest.fixture
    async def adapter(
        self,
        docker_host: str,
        owner: str,
        engine_proxy: SocketProxy | None,
        gateway_image: str | None,
        sandbox: dict[str, str],
    ) -> AsyncIterator[DockerAdapter]:
        host = engine_proxy.host if engine_proxy else docker_host
        reach = {"host": host}
        async with kit_adapter(reach, owner, gateway_image, docker_host, **sandbox) as adapter:
            yield adapter

    @pytest.fixture
    def harness(
        self,
        docker_host: str,
        engine_proxy: SocketProxy | None,
        sandbox: dict[str, str],
        request: pytest.FixtureRequest,
    ) -> ConformanceHarness:
        # The harness's own engine can be frozen (the hang hooks); an engine of one's own not.
        own = os.environ.get(ENV_HOST)
        engine = None if own else request.getfixturevalue("docker_engine")
        harness = DockerHarness(docker_host, engine_proxy, engine)
        if sandbox:
            harness.plan_isolation = IsolationClass.SANDBOXED
        return harness
