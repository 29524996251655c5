"""A fleet of mixed runtimes passes the conformance kit: a real Docker Engine and the local
control plane (kwok) as the members of one fleet (asyncio: the backends are run apart by each
member's own suite and by the fleet of two engines).

The engine's share is set to one kwok node's (4 CPUs, 8 GiB), so the two members have the same
room and the kit's apps spread over both by rendezvous; each hook goes to the harness of the
member that holds the app.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from _docker_harness import DockerHarness
from _docker_tests import adapter_config
from _socket_proxy import SocketProxy
from pando_runtime_kubernetes import KubernetesAdapter
from test_conformance_kube import _harness

import pando_runtime as pr
from pando_runtime.fleet import FleetAdapter, FleetMembers
from pando_runtime.testing.conformance import (
    ConformanceHarness,
    ConformanceSuite,
    FleetHarness,
)

pytestmark = [pytest.mark.kube]

KWOK_NODE = {"capacity_cpu_millis": 4000, "capacity_memory_bytes": 8 * 1024**3}
"""One kwok node's allocatable, as the engine's share: the members' rooms are equal."""


@pytest.fixture
async def engine_proxy_of(docker_engine: Any) -> AsyncIterator[SocketProxy]:
    """A proxy in front of the engine that the stale-cache hooks cut."""
    folder = Path(tempfile.mkdtemp(prefix="pdk", dir="/tmp"))  # socket paths are short
    try:
        proxy = SocketProxy(folder / "d.sock", Path(docker_engine.socket_path))
        async with proxy.running():
            yield proxy
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class TestEngineAndClusterFleetConformance(ConformanceSuite):
    single_pool: ClassVar[bool] = False

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    async def adapter(
        self,
        conformance_config: dict[str, Any],
        apiserver_proxy: Any,
        docker_engine: Any,
        engine_proxy_of: SocketProxy,
    ) -> AsyncIterator[FleetAdapter]:
        owner = f"k{uuid.uuid4().hex[:10]}"
        engine_settings = adapter_config(
            engine_proxy_of.host, owner, cache_max_staleness=2.0, cache_probe_interval=0.5
        )
        members = {
            "engine": pr.load_adapter("docker", {**engine_settings, **KWOK_NODE}),
            "cluster": KubernetesAdapter(conformance_config),
        }
        try:
            async with FleetAdapter(source=FleetMembers(members, control="engine")) as fleet:
                yield fleet
        finally:
            if apiserver_proxy is not None:
                apiserver_proxy.toxiproxy.reset()
            await DockerHarness(f"unix://{docker_engine.socket_path}").remove_owned(owner)

    @pytest.fixture
    def harness(
        self,
        kube_cluster: Any,
        admin_api: Any,
        apiserver_proxy: Any,
        docker_engine: Any,
        engine_proxy_of: SocketProxy,
    ) -> ConformanceHarness:
        engine = DockerHarness(f"unix://{docker_engine.socket_path}", engine_proxy_of)
        cluster = _harness(kube_cluster, admin_api, apiserver_proxy)
        # kwok's exec never closes a command's stdin: its harness's commands suit both members.
        members = {"engine": engine, "cluster": cluster}
        return FleetHarness(members, primary="engine", commands="cluster")
