"""Fixtures of the PostgreSQL lease store's tests: the session's cluster, a table per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from localstores import PostgresServer, two_clients

import pando_runtime as pr


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """The store rules on both backends; the kit and the faults override it (asyncio)."""
    return str(request.param)


@pytest.fixture
def postgres_settings(postgres_server: PostgresServer) -> dict[str, Any]:
    """Settings of a store on the session's cluster, with a table no other test uses."""
    return {
        "conninfo": postgres_server.conninfo,
        "table": f"leases_{uuid.uuid4().hex[:12]}",
        "timeout": 5.0,
    }


@pytest.fixture
async def lease_stores(
    postgres_settings: dict[str, Any],
) -> AsyncIterator[tuple[pr.plugin.LeaseStoreClient, pr.plugin.LeaseStoreClient]]:
    """Two clients of one table, loaded by name as a host would: two replicas' connections."""
    async with two_clients("postgres", postgres_settings) as clients:
        yield clients


@pytest.fixture(scope="module")
def toxiproxy_server() -> Iterator[Any]:
    """One Toxiproxy server on loopback for a module's fault tests (its proxies per test)."""
    from localcluster import ToxiproxyServer  # noqa: PLC0415 - the test harness

    with ToxiproxyServer() as server:
        yield server
