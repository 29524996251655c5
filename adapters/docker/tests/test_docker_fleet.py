"""A fleet of real Docker engines: the kit, placement by room, engines going silent, restarts.

Two engines of the harness (``docker_engine`` and ``second_docker_engine``), each in network
namespaces of its own, are the members; the fleet reaches each over its unix socket. What is
counted is counted on the engines themselves (their own container and network lists), never
through the adapter.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from _docker_harness import DockerHarness
from _docker_tests import SLEEP, adapter_config
from _socket_proxy import SocketProxy

import pando_runtime as pr
from pando_runtime.fleet import FleetAdapter, FleetMembers
from pando_runtime.testing.conformance import (
    ConformanceHarness,
    ConformanceSuite,
    FakeHarness,
    FleetHarness,
    scripted_fake,
)

MiB = 1024**2
GiB = 1024**3


def _host(engine: Any) -> str:
    return f"unix://{engine.socket_path}"


@pytest.fixture
def engines(docker_engine: Any, second_docker_engine: Any) -> dict[str, Any]:
    """The two engines by member name, each with the Squid image of restricted egress."""
    from localdocker import SQUID, squid_image  # noqa: PLC0415 - only with the harness

    for engine in (docker_engine, second_docker_engine):
        if SQUID not in engine.api.image_names():
            engine.load_image(squid_image().archive)
    return {"one": docker_engine, "two": second_docker_engine}


@pytest.fixture
def fleet_owner() -> str:
    return f"f{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def proxies(engines: dict[str, Any]) -> AsyncIterator[dict[str, SocketProxy]]:
    """A proxy in front of each engine that a test can cut (the kit's stale-cache hooks)."""
    folder = Path(tempfile.mkdtemp(prefix="pdf", dir="/tmp"))  # socket paths are short
    try:
        async with contextlib.AsyncExitStack() as running:
            made = {}
            for name, engine in engines.items():
                proxy = SocketProxy(folder / f"{name}.sock", Path(engine.socket_path))
                await running.enter_async_context(proxy.running())
                made[name] = proxy
            yield made
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _member(host: str, owner: str, **more: Any) -> dict[str, Any]:
    settings = adapter_config(host, owner, cache_max_staleness=2.0, cache_probe_interval=0.5)
    return {"adapter": "docker", "settings": {**settings, **more}}


def _fleet_settings(engines: dict[str, Any], owner: str, **more: Any) -> dict[str, Any]:
    members = {name: _member(_host(engine), owner) for name, engine in engines.items()}
    return {"members": members, "events_retry": [0.2, 0.5, 1.0], **more}


async def _cleanup(engines: dict[str, Any], owner: str) -> None:
    for engine in engines.values():
        await DockerHarness(_host(engine)).remove_owned(owner)


# -- the conformance kit -------------------------------------------------------------------


class TestDockerFleetConformance(ConformanceSuite):
    """Two engines as one runtime, on asyncio and trio."""

    single_pool: ClassVar[bool] = False

    @pytest.fixture
    async def adapter(
        self, engines: dict[str, Any], proxies: dict[str, SocketProxy], fleet_owner: str
    ) -> AsyncIterator[FleetAdapter]:
        from localdocker import SQUID  # noqa: PLC0415

        members = {
            name: _member(proxies[name].host, fleet_owner, egress_gateway_image=str(SQUID))
            for name in engines
        }
        try:
            async with FleetAdapter({"members": members, "events_retry": [0.2]}) as fleet:
                yield fleet
        finally:
            await _cleanup(engines, fleet_owner)

    @pytest.fixture
    def harness(
        self, engines: dict[str, Any], proxies: dict[str, SocketProxy]
    ) -> ConformanceHarness:
        members = {n: DockerHarness(_host(e), proxies[n]) for n, e in engines.items()}
        return FleetHarness(members, primary="one")


class TestDockerAndFakeFleetConformance(ConformanceSuite):
    """An engine and the fake as one runtime (asyncio: nothing here differs on trio)."""

    single_pool: ClassVar[bool] = False

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    async def adapter(
        self, engines: dict[str, Any], proxies: dict[str, SocketProxy], fleet_owner: str
    ) -> AsyncIterator[FleetAdapter]:
        engine = pr.load_adapter("docker", _member(proxies["one"].host, fleet_owner)["settings"])
        members = {"engine": engine, "fake": scripted_fake()}
        source = _Made(FleetMembers(adapters=members, control="engine"))
        try:
            async with FleetAdapter(source=source) as fleet:
                yield fleet
        finally:
            await _cleanup({"one": engines["one"]}, fleet_owner)

    @pytest.fixture
    def harness(
        self, engines: dict[str, Any], proxies: dict[str, SocketProxy]
    ) -> ConformanceHarness:
        engine = DockerHarness(_host(engines["one"]), proxies["one"])
        return FleetHarness({"engine": engine, "fake": FakeHarness()}, primary="engine")


class _Made:
    """Members made by the test, as a fleet's source."""

    def __init__(self, members: FleetMembers) -> None:
        self.members = members

    async def open(self) -> FleetMembers:
        return self.members


# -- placement, silence, restarts ------------------------------------------------------------


def _plan(bundle_id: str, *, memory: int = 64 * MiB, first_deploy: bool = True) -> pr.BundlePlan:
    web = pr.WorkloadPlan(
        name="web",
        image="pando.test/busybox:1",
        command=SLEEP,
        resources=pr.Resources(memory_bytes=memory),
    )
    return pr.BundlePlan(bundle_id=bundle_id, workloads=(web,), first_deploy=first_deploy)


async def _on_engine(engine: Any, owner: str, what: str = "ps") -> Counter[str]:
    """Bundles by how many containers (``ps``) or networks (``network``) of ``owner`` the
    engine itself lists for each."""
    label = f"label=io.pando.owner={owner}"
    fmt = '{{.Label "io.pando.bundle"}}'
    args = ("ps", "-a") if what == "ps" else ("network", "ls")
    out = await anyio.to_thread.run_sync(
        lambda: engine.docker(*args, "--filter", label, "--format", fmt)
    )
    return Counter(line for line in out.stdout.split() if line)


@pytest.fixture
def anyio_backend() -> str:
    """The tests below show what a fleet does; the backends differ in none of it."""
    return "asyncio"


async def test_bad_settings_are_refused_every_problem_at_its_path(
    engines: dict[str, Any], fleet_owner: str
) -> None:
    one = _host(engines["one"])
    settings = {
        "members": {
            "host-a": {"adapter": "docker", "settings": {"host": "ftp://nowhere", "owner": "x"}},
            "host-b": {"adapter": "dockr", "settings": {}},
            "host-c": _member(one, fleet_owner),
            "host-d": _member(one, fleet_owner),
        }
    }
    with pytest.raises(pr.InvalidConfig) as caught:
        pr.load_adapter("fleet", settings)
    paths = [p.path for p in caught.value.problems]
    assert paths == [
        "members['host-a'].settings.host",
        "members['host-b'].adapter",
        "members['host-d'].settings",
    ], caught.value.problems
