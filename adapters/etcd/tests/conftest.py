"""Fixtures of the etcd lease store's tests: the session's etcd, a prefix per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from localstores import EtcdServer, two_clients

import pando_runtime as pr


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """The store rules on both backends; the kit and the faults override it (asyncio)."""
    return str(request.param)


@pytest.fixture
def etcd_settings(etcd_server: EtcdServer) -> dict[str, Any]:
    """Settings of a store on the session's etcd, under a prefix no other test uses."""
    return {
        "address": etcd_server.address,
        "prefix": f"test/{uuid.uuid4().hex[:12]}/",
        "timeout": 5.0,
    }


@pytest.fixture
async def lease_stores(
    etcd_settings: dict[str, Any],
) -> AsyncIterator[tuple[pr.plugin.LeaseStoreClient, pr.plugin.LeaseStoreClient]]:
    """Two clients of one prefix, loaded by name as a host would: two replicas' connections."""
    async with two_clients("etcd", etcd_settings) as clients:
        yield clients
