"""A fleet's host replicas over a real lease store: the membership kit on a fleet of two fakes.

Each replica is a fleet of its own over the same two runtimes (the second fleet's members are
the fakes' replicas), its leases in the session's etcd. What is under test is the fleet's part:
its ``lease_store`` setting, its capability, one membership guarding every member's writes, and
the bundles of every member handed over. The members' kind does not matter to it (a fleet of
Docker engines joins the same way; the Docker adapter's own membership runs over real engines in
its tests).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from localstores import EtcdServer

import pando_runtime as pr
from pando_runtime.fleet import FleetAdapter, FleetMembers
from pando_runtime.testing import FakeAdapter
from pando_runtime.testing.conformance import (
    ConformanceHarness,
    FakeHarness,
    FleetHarness,
    MembershipConformance,
)


def _fleet(members: dict[str, pr.RuntimeAdapter], store: dict[str, Any] | None) -> FleetAdapter:
    config = {"members": {}, "lease_store": store}
    return FleetAdapter(config, source=FleetMembers(adapters=members, control="a"))


class ReplicaFleetHarness(FleetHarness):
    """The fakes' hooks, and a second replica: a fleet over the fakes' replicas, same store."""

    @contextlib.asynccontextmanager
    async def replica(self, adapter: pr.RuntimeAdapter) -> AsyncIterator[pr.RuntimeAdapter]:
        assert isinstance(adapter, FleetAdapter)
        fakes = adapter.members
        replicas = {n: m.replica() for n, m in fakes.items() if isinstance(m, FakeAdapter)}
        store = adapter.config.lease_store
        assert store is not None
        named = {"kind": store.kind, "settings": store.settings}
        async with _fleet(dict(replicas), named) as other:
            yield other


class TestFleetMembership(MembershipConformance):
    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    async def adapter(self, etcd_server: EtcdServer) -> AsyncIterator[FleetAdapter]:
        prefix = f"fleet/{uuid.uuid4().hex[:12]}/"
        store = {"kind": "etcd", "settings": {"address": etcd_server.address, "prefix": prefix}}
        async with _fleet({"a": FakeAdapter(), "b": FakeAdapter()}, store) as fleet:
            yield fleet

    @pytest.fixture
    def harness(self) -> ConformanceHarness:
        harness = ReplicaFleetHarness({"a": FakeHarness(), "b": FakeHarness()}, primary="a")
        harness.timeout = 30.0  # every lease call is a round trip to etcd
        return harness


SECRET = f"never-shown-{uuid.uuid4().hex}"


@pytest.mark.anyio
async def test_a_fleet_declares_membership_only_over_a_named_store() -> None:
    store = {"kind": "postgres", "settings": {"password": SECRET}}
    async with _fleet({"a": FakeAdapter()}, store) as named:
        assert (await named.capabilities()).membership
        assert SECRET not in repr(named.config)
    async with _fleet({"a": FakeAdapter()}, None) as plain:
        assert not (await plain.capabilities()).membership, "not the lone member's own"
        with pytest.raises(pr.CapabilityUnsupported):
            async with plain.membership("a"):
                pass


def test_a_fleets_bad_store_is_refused_with_its_members_problems() -> None:
    settings = {
        "members": {"a": {"adapter": "fake", "settings": {"no_such_setting": 1}}},
        "lease_store": {"kind": "postgres", "settings": {"password": SECRET, "table": "Bad-"}},
    }
    with pytest.raises(pr.InvalidConfig) as caught:
        pr.load_adapter("fleet", settings)
    paths = sorted(p.path for p in caught.value.problems)
    assert paths == ["lease_store.settings.table", "members['a'].settings.no_such_setting"]
    assert SECRET not in str(caught.value) + repr(caught.value.to_dict())
