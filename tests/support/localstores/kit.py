"""The membership kit over a real lease store: the fake runtime, its leases in the store.

The conformance kit's membership tests need an adapter with replicas; the fake gives them
and keeps every replica's leases in the store under test (``FakeAdapter(lease_store=...)``),
so the tests the fake and Kubernetes pass run unchanged against each store.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import pytest

import pando_runtime as pr
from pando_runtime.plugin import LeaseStore, LeaseStoreClient
from pando_runtime.testing import FakeAdapter
from pando_runtime.testing.conformance import (
    ConformanceHarness,
    FakeHarness,
    MembershipConformance,
)

__all__ = ["StoreHarness", "StoreMembershipConformance", "served_again", "two_clients"]


@contextlib.asynccontextmanager
async def two_clients(
    kind: str, settings: dict[str, Any]
) -> AsyncIterator[tuple[LeaseStoreClient, LeaseStoreClient]]:
    """Two clients of one store, loaded by name as a host would: two replicas' connections
    (what ``LeaseStoreConformance``'s ``lease_stores`` fixture gives)."""
    a = pr.load_lease_store(kind, settings)
    b = pr.load_lease_store(kind, settings)
    try:
        yield a, b
    finally:
        await a.aclose()
        await b.aclose()


class StoreHarness(FakeHarness):
    """The fake's hooks, waiting longer: every lease call is a real round trip."""

    timeout = 30.0


class StoreMembershipConformance(MembershipConformance):
    """The membership kit over the store of a ``lease_stores`` fixture (two of its clients)."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    async def adapter(
        self, lease_stores: tuple[LeaseStoreClient, LeaseStoreClient]
    ) -> AsyncIterator[FakeAdapter]:
        async with FakeAdapter(lease_store=lease_stores[0]) as fake:
            yield fake

    @pytest.fixture
    def harness(self) -> ConformanceHarness:
        return StoreHarness()


async def served_again(store: LeaseStore, group: str, *, hang: float = 60.0) -> Sequence[Any]:
    """The leases of ``group`` once ``store`` answers again (after a thaw it may be catching up:
    a call may still time out); a hang after ``hang`` seconds."""
    with anyio.fail_after(hang):
        while True:
            try:
                return await store.list_leases(group)
            except pr.AdapterUnavailable:
                await anyio.sleep(0.1)
