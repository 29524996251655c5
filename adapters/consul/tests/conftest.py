"""Fixtures of the Consul backend's tests: both anyio backends, a node of each test's own,
and Toxiproxy for the fault tests."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from pando_runtime_consul import ConsulCatalog

import pando_runtime as pr


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def node() -> str:
    """A synthetic node name no other test uses (the agent lives for the session)."""
    return f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def toxiproxy_server() -> Iterator[Any]:
    """One Toxiproxy server on loopback for a module's fault tests (its proxies per test)."""
    from localcluster import ToxiproxyServer  # noqa: PLC0415 - the test harness

    with ToxiproxyServer() as server:
        yield server


@pytest.fixture
async def consul(consul_agent: Any) -> AsyncIterator[ConsulCatalog]:
    """The Consul backend on the session's agent, loaded by name as a host would."""
    backend = pr.catalog.load_catalog("consul", {"address": consul_agent.http_address})
    assert isinstance(backend, ConsulCatalog)
    try:
        yield backend
    finally:
        await backend.aclose()
