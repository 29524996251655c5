"""The Docker adapter passes the conformance kit on a real Docker Engine, asyncio and trio;
over TLS and over SSH too (asyncio).

The harness's hooks act on real containers (see ``_docker_harness``); the adapter reaches the
engine through a proxy of its own (``_socket_proxy``), with a cache bound of 2 s: the stale-cache
and event-gap hooks cut that proxy, so the adapter's event stream really ends while the engine
serves every other client. Every capability the adapter declares is tested, and the kit checks
that the rest raise ``CapabilityUnsupported``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from _docker_harness import DockerHarness
from _docker_tests import adapter_config, ssh_settings, tls_settings
from _socket_proxy import SocketProxy
from pando_runtime_docker import DockerAdapter

from pando_runtime.testing.conformance import ConformanceHarness, ConformanceSuite


@contextlib.asynccontextmanager
async def kit_adapter(
    reach: dict[str, Any], owner: str, gateway_image: str | None, engine_host: str
) -> AsyncIterator[DockerAdapter]:
    """An adapter reaching the engine as ``reach`` says, with the kit's quick bounds; what its
    owner made is removed through ``engine_host`` at the end."""
    config = adapter_config(
        **reach,
        owner=owner,
        cache_max_staleness=2.0,
        cache_probe_interval=0.5,
        egress_gateway_image=gateway_image,
    )
    try:
        async with DockerAdapter(config) as adapter:
            yield adapter
    finally:
        await DockerHarness(engine_host).remove_owned(owner)


class TestDockerConformance(ConformanceSuite):
    @pytest.fixture
    async def adapter(
        self,
        docker_host: str,
        owner: str,
        engine_proxy: SocketProxy | None,
        gateway_image: str | None,
    ) -> AsyncIterator[DockerAdapter]:
        host = engine_proxy.host if engine_proxy else docker_host
        async with kit_adapter({"host": host}, owner, gateway_image, docker_host) as adapter:
            yield adapter

    @pytest.fixture
    def harness(self, docker_host: str, engine_proxy: SocketProxy | None) -> ConformanceHarness:
        return DockerHarness(docker_host, engine_proxy)


class _RemoteConformance(ConformanceSuite):
    """The kit over a remote way in (``remote``: the settings, and the proxy on the host's
    loopback into the engine's namespace that the event-gap and stale-cache hooks cut).

    On asyncio alone: the unix-socket run above covers both backends, and what differs between
    them over TLS (the TLS stream under a half-closed exec) is tested on both in
    ``test_docker_remote.py``; a whole kit run costs over two minutes.
    """

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    async def adapter(
        self,
        engine: Any,
        remote: tuple[dict[str, Any], SocketProxy],
        owner: str,
        gateway_image: str | None,
    ) -> AsyncIterator[DockerAdapter]:
        async with kit_adapter(remote[0], owner, gateway_image, engine.base_url) as adapter:
            yield adapter

    @pytest.fixture
    def harness(
        self, engine: Any, remote: tuple[dict[str, Any], SocketProxy]
    ) -> ConformanceHarness:
        return DockerHarness(engine.base_url, remote[1])


class TestDockerConformanceOverTls(_RemoteConformance):
    """The kit over ``tcp://`` with TLS, client certificate required."""

    @pytest.fixture
    def remote(self, engine: Any, tls_proxy: SocketProxy) -> tuple[dict[str, Any], SocketProxy]:
        return tls_settings(engine, tls_proxy), tls_proxy


class TestDockerConformanceOverSsh(_RemoteConformance):
    """The kit over ``ssh://`` (Debian's sshd in the engine's namespace, its host key pinned):
    each cut ends the SSH connection, and the adapter dials a new one."""

    @pytest.fixture
    def remote(
        self, engine: Any, engine_sshd: Any, ssh_proxy: SocketProxy
    ) -> tuple[dict[str, Any], SocketProxy]:
        return ssh_settings(engine, engine_sshd, ssh_proxy), ssh_proxy
