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

import anyio
import pytest
from localstores import EtcdServer

import pando_runtime as pr
from pando_runtime.fleet import FLEET, FleetAdapter, FleetMembers
from pando_runtime.plugin import DelegatingAdapter, LeaseRecord, write_epoch
from pando_runtime.testing import FakeAdapter
from pando_runtime.testing.conformance import (
    ConformanceHarness,
    FakeHarness,
    FleetHarness,
    MembershipConformance,
)

pytestmark = pytest.mark.anyio


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


def test_the_store_setting_is_described_to_host_uis_with_its_settings_write_only() -> None:
    (store,) = [f for f in FLEET.config_fields if f.key == "lease_store"]
    assert store.type == "object"
    schema = FLEET.config_schema()["properties"]["lease_store"]["anyOf"][0]
    assert schema["required"] == ["kind"]
    assert schema["properties"]["settings"]["writeOnly"] is True


class Member(DelegatingAdapter):
    """A fake as a fleet's member: what the fleet asks of where bundles are, passed on."""

    kind = "member"

    async def holds(self, bundle_id: str) -> bool:
        return await self.adapter.holds(bundle_id)  # type: ignore[attr-defined, no-any-return]

    def known_to_hold(self, bundle_id: str) -> bool:
        return self.adapter.known_to_hold(bundle_id)  # type: ignore[attr-defined, no-any-return]

    async def held_bundles(self) -> list[str]:
        return await self.adapter.held_bundles()  # type: ignore[attr-defined, no-any-return]


class Gate(Member):
    """A member whose ``apply`` waits until both replicas' applies have begun (anywhere); it
    notes the epoch each writer wrote under, by writer."""

    kind = "gate"

    def __init__(
        self, adapter: FakeAdapter, arrivals: list[str], both: anyio.Event, epochs: dict[str, int]
    ) -> None:
        super().__init__(adapter)
        self._arrivals, self._both, self._epochs = arrivals, both, epochs

    async def apply(self, plan: pr.BundlePlan) -> pr.BundleHandle:
        self._arrivals.append(plan.bundle_id)
        epoch = write_epoch(plan.bundle_id)
        if epoch is not None:
            self._epochs[epoch.replica] = epoch.epoch
        if len(self._arrivals) == 2:
            self._both.set()
        with anyio.fail_after(30):
            await self._both.wait()
        return await self.adapter.apply(plan)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the store's part is the same on trio
async def test_two_replicas_placing_one_app_at_once_place_it_once(etcd_server: EtcdServer) -> None:
    """Each replica's fleet would choose another member (each takes new apps on one alone, as
    while a drain is rolled out); both write the app at once, as an owner paused past its lease
    and the next owner do (``override``): the store's record sends the second to the first's."""
    prefix = f"placing/{uuid.uuid4().hex[:12]}/"
    store = {"kind": "etcd", "settings": {"address": etcd_server.address, "prefix": prefix}}
    a, b = FakeAdapter(), FakeAdapter()
    arrivals: list[str] = []
    both = anyio.Event()
    epochs: dict[str, int] = {}

    def fleet(adapters: dict[str, FakeAdapter], closed: str) -> FleetAdapter:
        gated = {n: Gate(m, arrivals, both, epochs) for n, m in adapters.items()}
        members = FleetMembers(adapters=gated, control="a", closed=frozenset({closed}))
        return FleetAdapter({"members": {}, "lease_store": store}, source=members)

    plan = pr.BundlePlan(
        bundle_id="placed-once",
        workloads=(pr.WorkloadPlan(name="web", image="registry.example/app:1"),),
        first_deploy=True,
    )
    settings = pr.MembershipSettings(lease_duration=3.0, renew_deadline=2.0, retry_period=0.25)
    handles: list[pr.BundleHandle] = []
    async with (
        fleet({"a": a, "b": b}, closed="b") as one,
        fleet({"a": a.replica(), "b": b.replica()}, closed="a") as two,
        one.membership("one", settings) as m1,
        two.membership("two", settings) as m2,
    ):

        async def place(f: FleetAdapter, m: pr.Membership) -> None:
            with m.override(plan.bundle_id):
                handles.append(await f.apply(plan))

        async with anyio.create_task_group() as group:
            group.start_soon(place, one, m1)
            group.start_soon(place, two, m2)
        homes = {h.details["member"] for h in handles}
        assert len(homes) == 1, f"placed on {homes}"
        held = [name for name, fake in (("a", a), ("b", b)) if plan.bundle_id in fake.bundle_ids()]
        assert held == list(homes)
        assert arrivals == [plan.bundle_id] * 2, "both replicas wrote it"
        assert await _records(one) == {plan.bundle_id: homes}
        record = await _record(one, plan.bundle_id)
        assert sorted(epochs.values()) == [1, 2], "each writer moved the app's epoch"
        assert record.renewals == epochs[record.holder], "the placing writer's epoch, recorded"
        with m2.override(plan.bundle_id):
            await two.destroy(pr.BundleRef(plan.bundle_id), pr.DestroyOptions(keep_volumes=False))
        assert await _records(one) == {}, "a destroy with the volumes deletes the record"


async def _records(fleet: FleetAdapter) -> dict[str, set[str]]:
    """The placement records in the fleet's store now: the member each names, by app."""
    store = fleet.replicas.store
    assert store is not None
    return {r.name: set(r.record.view) for r in await store.list_leases("placements")}


async def _record(fleet: FleetAdapter, bundle_id: str) -> LeaseRecord:
    store = fleet.replicas.store
    assert store is not None
    found = await store.read_lease("placements", bundle_id)
    assert found is not None
    return found.record


class EpochReader(Member):
    """A member that notes the epoch each of its writes is made under, as a fencing one reads
    it, and refuses one apply as a runtime holding a newer epoch would."""

    kind = "epoch-reader"

    def __init__(self, adapter: FakeAdapter) -> None:
        super().__init__(adapter)
        self.seen: list[tuple[str, int | None]] = []
        self.refuse_next = False

    async def apply(self, plan: pr.BundlePlan) -> pr.BundleHandle:
        epoch = write_epoch(plan.bundle_id)
        self.seen.append(("apply", epoch.epoch if epoch is not None else None))
        assert write_epoch("another-app") is None, "the epoch of this write's bundle only"
        if self.refuse_next:
            self.refuse_next = False
            raise pr.NotOwner("the runtime holds a newer epoch")
        return await self.adapter.apply(plan)

    async def stop(self, ref: pr.BundleRef) -> None:
        epoch = write_epoch(ref.bundle_id)
        self.seen.append(("stop", epoch.epoch if epoch is not None else None))
        await self.adapter.stop(ref)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the store's part is the same on trio
async def test_a_fleets_member_writes_under_the_apps_epoch_moved_once_a_tenure(
    etcd_server: EtcdServer,
) -> None:
    """The fleet moves the app's epoch on its first apply in a tenure and hands it to the
    member through the task's context (``write_epoch``); a refusal from within moves it anew."""
    prefix = f"epochs/{uuid.uuid4().hex[:12]}/"
    store = {"kind": "etcd", "settings": {"address": etcd_server.address, "prefix": prefix}}
    member = EpochReader(FakeAdapter())
    plan = pr.BundlePlan(
        bundle_id="fenced", workloads=(pr.WorkloadPlan(name="web", image="registry.example/a:1"),)
    )
    settings = pr.MembershipSettings(lease_duration=3.0, renew_deadline=2.0, retry_period=0.25)
    async with _fleet({"a": member}, store) as fleet:
        await fleet.apply(plan)  # no membership joined: no epoch
        async with fleet.membership("one", settings) as membership:
            with anyio.fail_after(30):
                while not membership.owns(plan.bundle_id):  # noqa: ASYNC110 - the store's answer
                    await anyio.sleep(0.05)
            await fleet.apply(plan)
            await fleet.apply(plan)
            await fleet.stop(pr.BundleRef(plan.bundle_id))
            member.refuse_next = True
            with pytest.raises(pr.NotOwner):
                await fleet.apply(plan)
            await fleet.apply(plan)
            assert write_epoch(plan.bundle_id) is None, "outside a write"
            assert (fleet.epochs.moves, fleet.epochs.reads) == (2, 0)
    assert member.seen == [
        ("apply", None),
        ("apply", 1),
        ("apply", 1),  # the same tenure: the same epoch, no store call
        ("stop", None),  # a stop moves no epoch
        ("apply", 1),
        ("apply", 2),  # refused from within: moved anew
    ]
