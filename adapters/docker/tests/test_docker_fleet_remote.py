"""A fleet of remote engines: one reached over SSH, the other over TLS, passes the kit.

The members are the harness's two engines, each reached only the remote way (the first
through Debian's sshd in its namespace, its host key pinned; the second over TLS with a client
certificate, taken by the name of a Docker context that holds its address and TLS material),
through proxies on the host's loopback that the kit's hooks cut. The hooks act on each engine
through its own unix socket, never through the adapter.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from _docker_harness import DockerHarness
from _docker_tests import adapter_config, ssh_settings, write_context
from _socket_proxy import SocketProxy

from pando_runtime.fleet import FleetAdapter
from pando_runtime.testing.conformance import ConformanceHarness, ConformanceSuite, FleetHarness


@pytest.fixture
def engines(docker_engine: Any, second_docker_engine: Any) -> dict[str, Any]:
    """The member engines by name, each with the Squid image of restricted egress."""
    from localdocker import SQUID, squid_image  # noqa: PLC0415 - only with the harness

    for engine in (docker_engine, second_docker_engine):
        if SQUID not in engine.api.image_names():
            engine.load_image(squid_image().archive)
    return {"ssh": docker_engine, "tls": second_docker_engine}


@pytest.fixture
async def second_tls_proxy(second_docker_engine: Any) -> AsyncIterator[SocketProxy]:
    """The way in to the second engine's TLS port."""
    engine = second_docker_engine
    proxy = SocketProxy.into_namespace(engine, "127.0.0.1", engine.tls.port)
    async with proxy.running():
        yield proxy


class TestRemoteDockerFleetConformance(ConformanceSuite):
    """An engine over SSH and one over TLS as one runtime (on asyncio: the unix-socket fleet
    runs on both backends, and the remote ways are tested on both where they differ)."""

    single_pool: ClassVar[bool] = False

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    def proxies(
        self, ssh_proxy: SocketProxy, second_tls_proxy: SocketProxy
    ) -> dict[str, SocketProxy]:
        return {"ssh": ssh_proxy, "tls": second_tls_proxy}

    @pytest.fixture
    async def adapter(
        self,
        engines: dict[str, Any],
        engine_sshd: Any,
        proxies: dict[str, SocketProxy],
        owner: str,
        tmp_path: Path,
    ) -> AsyncIterator[FleetAdapter]:
        from localdocker import SQUID  # noqa: PLC0415 - only with the harness

        tls = engines["tls"].tls
        store = tmp_path / "docker-config"
        write_context(
            store,
            "engine-two",
            proxies["tls"].host,
            tls={"ca.pem": tls.ca.cert, "cert.pem": tls.client.cert, "key.pem": tls.client.key},
        )
        ways = {
            "ssh": ssh_settings(engines["ssh"], engine_sshd, proxies["ssh"]),
            "tls": {"host": None, "context": "engine-two", "docker_config": str(store)},
        }
        members = {
            name: {
                "adapter": "docker",
                "settings": adapter_config(
                    **way,
                    owner=owner,
                    cache_max_staleness=3.0,
                    cache_probe_interval=0.5,
                    egress_gateway_image=str(SQUID),
                ),
            }
            for name, way in ways.items()
        }
        try:
            async with FleetAdapter({"members": members, "events_retry": [0.2]}) as fleet:
                yield fleet
        finally:
            for engine in engines.values():
                await DockerHarness(engine.base_url).remove_owned(owner)

    @pytest.fixture
    def harness(
        self, engines: dict[str, Any], proxies: dict[str, SocketProxy]
    ) -> ConformanceHarness:
        members = {n: DockerHarness(e.base_url, proxies[n], e) for n, e in engines.items()}
        return FleetHarness(members, primary="ssh")
