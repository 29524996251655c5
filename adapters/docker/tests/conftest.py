"""Fixtures of the Docker adapter's tests: a real Docker Engine and adapters over it.

The engine is the session's ``docker_engine`` (``localdocker``: Debian's dockerd, or the built
current one, in a network namespace of its own, images built offline); tests marked
``every_engine`` run on each release of ``--docker-engines``. ``PANDO_DOCKER_TEST_HOST``
points the tests at an engine of your own instead (it must hold ``pando.test/busybox:1``);
they only touch what their own owner label marks.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from _docker_harness import BUSYBOX, DockerHarness
from _docker_tests import ENV_HOST, adapter_config
from _socket_proxy import SocketProxy
from pando_runtime_docker import DockerAdapter


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """A test of the adapter runs on asyncio and on trio, unless its module pins asyncio:
    where the backends differ (streams: events, logs, exec, archives; faults mid-stream) the
    kit and those modules run on both; the rest is the same code on either."""
    return str(request.param)


@pytest.fixture(scope="session")
def docker_host(request: pytest.FixtureRequest, docker_engine_version: str) -> str:
    """The engine's address as the adapter's ``host`` setting (of the harness's engine of
    ``docker_engine_version``: ``every_engine`` tests run on each)."""
    own = os.environ.get(ENV_HOST)
    if own:
        return own
    engine: Any = request.getfixturevalue("docker_engine")
    return f"unix://{engine.socket_path}"


@pytest.fixture
async def engine_proxy(docker_host: str) -> AsyncIterator[SocketProxy | None]:
    """A proxy in front of the engine that a test can cut (``None`` over TCP)."""
    if not docker_host.startswith("unix://"):
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="pdx", dir="/tmp"))  # socket paths are short
    try:
        proxy = SocketProxy(folder / "d.sock", Path(docker_host.removeprefix("unix://")))
        async with proxy.running():
            yield proxy
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
async def tls_proxy(engine: Any) -> AsyncIterator[SocketProxy]:
    """The way in to the engine's TLS port (``127.0.0.1:2376`` of its namespace): a proxy on
    the host's loopback (``.host``: ``tcp://127.0.0.1:<port>``) that a test can cut."""
    proxy = SocketProxy.into_namespace(engine, "127.0.0.1", engine.tls.port)
    async with proxy.running():
        yield proxy


@pytest.fixture
async def ssh_proxy(engine: Any, engine_sshd: Any) -> AsyncIterator[SocketProxy]:
    """The way in to the sshd in the engine's namespace, as :func:`tls_proxy` is to TLS."""
    proxy = SocketProxy.into_namespace(engine, engine_sshd.address, engine_sshd.port)
    async with proxy.running():
        yield proxy


@pytest.fixture
def gateway_image(request: pytest.FixtureRequest) -> str | None:
    """The Squid image for restricted egress, loaded into the harness's engine once
    (``None`` on an engine of one's own: restricted plans are then refused)."""
    if os.environ.get(ENV_HOST):
        return None
    from localdocker import SQUID, squid_image  # noqa: PLC0415 - only with the harness

    engine: Any = request.getfixturevalue("docker_engine")
    if SQUID not in engine.api.image_names():
        engine.load_image(squid_image().archive)
    return str(SQUID)


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> Any:
    """The harness's engine (its namespace and stand-in outside world), or a skip on an engine
    of one's own."""
    if os.environ.get(ENV_HOST):
        pytest.skip("these tests need the harness's engine: its namespace and stand-in world")
    return request.getfixturevalue("docker_engine")


@pytest.fixture
def gvisor_runtime(gvisor_runtime: str) -> str:
    """The harness's name for gVisor's runtime (``runsc``), or a skip on an engine of one's
    own (which runtimes it has is not the harness's to know)."""
    if os.environ.get(ENV_HOST):
        pytest.skip("the sandboxed-app tests need the harness's engine, gVisor among its runtimes")
    return gvisor_runtime


@pytest.fixture
def guard_image(engine: Any) -> str:
    """The iptables image, built offline from the host's packages and loaded once."""
    from localdocker import IPTABLES, iptables_image  # noqa: PLC0415 - only with the harness

    if IPTABLES not in engine.api.image_names():
        engine.load_image(iptables_image().archive)
    return str(IPTABLES)


@pytest.fixture
def remove_guard_rules(engine: Any) -> Iterator[list[str]]:
    """Chains a test's guard installed, removed with their jumps afterwards (the rules match
    the whole pool, which every test shares)."""
    chains: list[str] = []
    yield chains
    rules = [
        *engine.run_in_netns(["iptables", "-w", "-S", "DOCKER-USER"]).stdout.splitlines(),
        *engine.run_in_netns(["iptables", "-w", "-S", "INPUT"]).stdout.splitlines(),
        *engine.run_in_netns(["iptables", "-w", "-S", "OUTPUT"]).stdout.splitlines(),
    ]
    for chain in chains:
        for rule in rules:
            if rule.startswith("-A ") and rule.endswith(f"-j {chain}"):
                engine.run_in_netns(["iptables", "-w", "-D", *rule.split()[1:]])
        engine.run_in_netns(["iptables", "-w", "-F", chain])
        engine.run_in_netns(["iptables", "-w", "-X", chain])


@pytest.fixture
def owner() -> str:
    """An owner id of this test alone: what it makes is apart from every other test's."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def docker_adapter(docker_host: str, owner: str) -> AsyncIterator[DockerAdapter]:
    """An open adapter of its own owner; what it made is removed at the end."""
    async with DockerAdapter(adapter_config(docker_host, owner)) as adapter:
        try:
            yield adapter
        finally:
            await DockerHarness(docker_host).remove_owned(owner)


@pytest.fixture
def harness(docker_host: str) -> DockerHarness:
    """The hooks that act on real containers."""
    return DockerHarness(docker_host)


__all__ = ["BUSYBOX", "adapter_config"]
