"""The fleet adapter's rules, shown on fakes (the same rules run over real engines and clusters
in the adapters' suites): its settings, placement by room, an app staying where it is, a
silent member, a restart, capabilities and events."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Self

import anyio
import attrs
import pytest

from pando_runtime import (
    AdapterUnavailable,
    BundleEventKind,
    BundlePlan,
    BundleRef,
    CapabilityUnsupported,
    DestroyOptions,
    InvalidConfig,
    InvalidInput,
    IsolationClass,
    Mount,
    Resources,
    RuntimeCapabilities,
    VolumePlan,
    VolumeRequest,
    WorkloadPlan,
    WorkloadRef,
    load_adapter,
    structure_config,
)
from pando_runtime.fleet import (
    ConfiguredMembers,
    FleetAdapter,
    FleetConfig,
    FleetMembers,
    fleet_capabilities,
)
from pando_runtime.testing import FakeAdapter

pytestmark = pytest.mark.anyio

GiB = 1024**3
MiB = 1024**2


def _plan(bundle_id: str, *, memory: int = 256 * MiB, first_deploy: bool = True) -> BundlePlan:
    web = WorkloadPlan(
        name="web", image="registry.example/app:1", resources=Resources(memory_bytes=memory)
    )
    return BundlePlan(bundle_id=bundle_id, workloads=(web,), first_deploy=first_deploy)


def _members(adapters: Mapping[str, FakeAdapter]) -> FleetMembers:
    """The fakes as a fleet's members, the first the control member."""
    return FleetMembers(adapters=dict(adapters), control=next(iter(adapters)))


def _fleet(**members: FakeAdapter) -> FleetAdapter:
    return FleetAdapter(source=_members(members))


def _fake(memory_gib: int, nodes: int = 1, **options: Any) -> FakeAdapter:
    return FakeAdapter({"nodes": nodes, "node_memory_bytes": memory_gib * GiB}, **options)


def _silence(fake: FakeAdapter) -> None:
    """The member stops answering: its view is unconfirmed past its bound."""
    fake.simulate_cache_down()
    fake.clock.advance(fake.config.max_staleness + 1)


# -- settings ------------------------------------------------------------------------------


def test_every_problem_of_the_settings_is_listed_at_its_path_before_any_io() -> None:
    settings = {
        "members": {
            "host-a": {"adapter": "fake", "settings": {"nodes": -1, "colour": "red"}},
            "host-b": {"adapter": "no-such-adapter"},
            "Bad_Name": {"adapter": "fake"},
            "inner": {"adapter": "fleet"},
        },
        "control": "elsewhere",
    }
    with pytest.raises(InvalidConfig) as caught:
        load_adapter("fleet", settings)
    paths = {p.path for p in caught.value.problems}
    assert paths == {
        "members['host-a'].settings.nodes",
        "members['host-a'].settings.colour",
        "members['host-b'].adapter",
        "members['Bad_Name']",
        "members['inner'].adapter",
        "control",
    }
    assert "no-such-adapter" in caught.value.message or caught.value.remedy


def test_two_members_on_one_runtime_as_one_owner_are_refused() -> None:
    class Keyed(FakeAdapter):
        def runtime_key(self) -> str:
            return "engine-1#owner=pando"

    def load(name: str, settings: Any) -> FakeAdapter:
        return Keyed(settings)

    members = {"a": {"adapter": "fake"}, "b": {"adapter": "fake"}}
    config = structure_config(FleetConfig, {"members": members})
    with pytest.raises(InvalidConfig) as caught:
        ConfiguredMembers(config, load=load)
    assert [p.path for p in caught.value.problems] == ["members['b'].settings"]
    assert "members['a']" in caught.value.problems[0].message


def test_the_fleet_is_an_adapter_of_its_own_entry_point() -> None:
    fleet = load_adapter("fleet", {"members": {"a": {"adapter": "fake"}}})
    assert isinstance(fleet, FleetAdapter)
    assert set(fleet.members) == {"a"}, "members are made at construction (no I/O)"


# -- placement -----------------------------------------------------------------------------


async def test_forty_new_apps_go_by_room_and_each_stays_where_it_is() -> None:
    big, small = _fake(12), _fake(4)
    async with _fleet(big=big, small=small) as fleet:
        where: Counter[str] = Counter()
        for i in range(40):
            handle = await fleet.apply(_plan(f"app-{i}"))
            where[handle.details["member"]] += 1
        # 40 x 256 MiB = 10 GiB over 12 and 4 GiB: the bigger takes apps until both have the
        # same room left (8 GiB of difference, 32 apps), then they alternate.
        assert where == {"big": 36, "small": 4}
        assert (len(big.bundle_ids()), len(small.bundle_ids())) == (36, 4)
        # Re-applied (a changed plan, a first deploy again): it stays.
        for i in range(40):
            home = await fleet.locate(f"app-{i}")
            again = await fleet.apply(_plan(f"app-{i}", memory=128 * MiB))
            assert again.details["member"] == home


async def test_a_volume_made_first_places_its_app_and_stays_with_it() -> None:
    a, b = _fake(4), _fake(8)
    async with _fleet(a=a, b=b) as fleet:
        handle = await fleet.create_volume(
            VolumeRequest(volume_id="data", bundle_id="stateful", name="data")
        )
        member, _, inner = handle.handle.partition("/")
        assert member == "b", "the roomier member"
        assert inner
        assert (a.known_to_hold("stateful"), b.known_to_hold("stateful")) == (False, True)
        await fleet.apply(_plan("stateful"))
        assert b.bundle_ids() == ["stateful"]
        await fleet.destroy(BundleRef("stateful"), DestroyOptions(keep_volumes=True))
        # Its volume is its record: re-applied, it comes back where its data is, even where
        # the other member now has more room.
        assert await fleet.apply(_plan("stateful"))
        assert (await fleet.locate("stateful")) == "b"
        observed = await fleet.observe(BundleRef("stateful"))
        assert observed.volumes[0].handle == handle, "observed handles name the member too"
        with pytest.raises(InvalidInput) as caught:
            await fleet.destroy_volume(attrs.evolve(handle, handle="nowhere/" + inner))
        assert caught.value.problems[0].path == "handle"


async def test_a_plan_that_needs_what_only_one_member_has_goes_only_there() -> None:
    plain = _fake(64, capabilities=RuntimeCapabilities(resource_limits=True))
    keeping = _fake(
        1, capabilities=RuntimeCapabilities(resource_limits=True, persistent_volumes=True)
    )
    async with _fleet(plain=plain, keeping=keeping) as fleet:
        caps = await fleet.capabilities()
        assert caps.persistent_volumes, "some member keeps volumes: a plan may ask for them"
        assert not caps.exec, "asked of a running app: only what every member has"
        with_volume = _with_volume(_plan("stateful"))
        assert (await fleet.apply(with_volume)).details["member"] == "keeping"
        assert (await fleet.apply(_plan("stateless"))).details["member"] == "plain"


async def test_a_sandboxed_plan_goes_only_to_a_sandboxed_member() -> None:
    ordinary = _fake(64, capabilities=RuntimeCapabilities(resource_limits=True))
    sandboxed = _fake(
        1,
        capabilities=RuntimeCapabilities(
            resource_limits=True, isolation_class=IsolationClass.SANDBOXED
        ),
    )
    async with _fleet(ordinary=ordinary, sandboxed=sandboxed) as fleet:
        assert (await fleet.capabilities()).isolation_class is IsolationClass.SANDBOXED
        strict = attrs.evolve(_plan("strict"), isolation=IsolationClass.SANDBOXED)
        assert (await fleet.apply(strict)).details["member"] == "sandboxed"
        assert (await fleet.apply(_plan("plain"))).details["member"] == "ordinary", "by room"
        writes = ordinary.writes + sandboxed.writes
        with pytest.raises(CapabilityUnsupported) as refused:
            await fleet.apply(attrs.evolve(_plan("vm"), isolation=IsolationClass.VM))
        assert refused.value.details["problems"][0]["path"] == "isolation"
        assert ordinary.writes + sandboxed.writes == writes, "nothing written"


def _with_volume(plan: BundlePlan) -> BundlePlan:
    web = attrs.evolve(plan.workloads[0], mounts=(Mount(volume_id="data", path="/data"),))
    return attrs.evolve(
        plan, workloads=(web,), volumes=(VolumePlan(volume_id="data", name="data"),)
    )


def test_what_a_fleet_can_do_is_said_per_kind_of_need() -> None:
    roomy = RuntimeCapabilities(exec=True, persistent_volumes=True, edge=True, trial_run=True)
    narrow = RuntimeCapabilities(exec=False, persistent_volumes=False, edge=False)
    caps = fleet_capabilities({"a": narrow, "b": roomy}, control="a", placing=["a", "b"])
    assert caps.persistent_volumes, "a plan's need: some member placing new apps"
    assert not caps.exec, "asked of any app: every member"
    assert not caps.edge, "the control member's"
    assert caps.trial_run, "some member's: a trial goes where it can run"
    closed = fleet_capabilities({"a": narrow, "b": roomy}, control="a", placing=["a"])
    assert not closed.persistent_volumes, "a member taking no new apps does not count"


async def test_a_plan_no_member_can_run_is_refused_before_anything_is_written() -> None:
    a = _fake(4, capabilities=RuntimeCapabilities(resource_limits=True))
    b = _fake(4, capabilities=RuntimeCapabilities(resource_limits=True))
    async with _fleet(a=a, b=b) as fleet:
        with pytest.raises(CapabilityUnsupported):
            await fleet.apply(_with_volume(_plan("stateful")))
        assert a.writes == b.writes == 0


# -- a silent member -----------------------------------------------------------------------


async def test_a_silent_members_apps_are_unavailable_never_absent_nor_placed_twice() -> None:
    a, b = _fake(8), _fake(4)
    async with _fleet(a=a, b=b) as fleet:
        await fleet.apply(_plan("on-a"))
        assert (await fleet.apply(_plan("on-b", memory=6 * GiB))).details["member"] == "a"
        await fleet.apply(_plan("small"))
        home = await fleet.locate("small")
        _silence(a)
        with pytest.raises(AdapterUnavailable) as caught:
            await fleet.observe(BundleRef("on-a"))
        assert caught.value.details["member"] == "a"
        assert caught.value.message.startswith("member a: ")
        # Found nowhere while a member is silent: it may be there.
        with pytest.raises(AdapterUnavailable) as caught:
            await fleet.observe(BundleRef("unknown"))
        assert caught.value.details["member"] == "a"
        with pytest.raises(AdapterUnavailable):
            await fleet.apply(_plan("on-a", first_deploy=False))
        assert b.bundle_ids() == ([] if home == "a" else ["small"]), "not placed on b meanwhile"
        # The host says it is a first deploy: placed on a member that answers.
        assert (await fleet.apply(_plan("brand-new"))).details["member"] == "b"
        a.faults.fail_next("capacity", AdapterUnavailable("down"))
        capacity = await fleet.capacity()
        assert capacity.details["silent"] == "a", "the sums are of the members that answer"
        assert capacity.total_memory_bytes == 4 * GiB
        a.simulate_cache_up()
        assert (await fleet.observe(BundleRef("on-a"))).exists
        assert (await fleet.apply(_plan("on-a"))).details["member"] == "a"
        assert a.bundle_ids().count("on-a") == 1
        assert "on-a" not in b.bundle_ids()


async def test_a_member_that_hangs_holds_up_no_decision_past_the_deadline() -> None:
    hung, up = _fake(64), _fake(8)  # the hung one the roomier: room alone would choose it
    fleet = FleetAdapter(source=_members({"hung": hung, "up": up}))
    fleet.configure({"members": {}, "answer_deadline": 0.2})
    asked = ("holds", "largest_fit_for", "observe")
    async with fleet:
        for method in asked:  # asked, it never answers (its connections open)
            hung.faults.add_latency(method, 3600)
        assert (await fleet.apply(_plan("first"))).details["member"] == "up"
        with pytest.raises(AdapterUnavailable) as caught:  # it may be on the hung member
            await fleet.apply(_plan("unknown", first_deploy=False))
        assert caught.value.details["member"] == "hung"
        assert caught.value.details["cause"] == "deadline"
        for method in asked:
            hung.faults.add_latency(method, 0)
        assert (await fleet.apply(_plan("second"))).details["member"] == "hung", "the roomier"
        assert hung.bundle_ids() == ["second"]


class _SlowToStart(FakeAdapter):
    """A member whose runtime is silent when the fleet starts, and answers from the third try."""

    tries = 0

    async def __aenter__(self) -> Self:
        self.tries += 1
        if self.tries < 3:
            raise AdapterUnavailable("the runtime does not answer yet")
        return self


async def test_a_member_that_cannot_start_holds_up_nothing_and_starts_later() -> None:
    late, up = _SlowToStart({"node_memory_bytes": 64 * GiB}), _fake(8)
    fleet = FleetAdapter(source=_members({"late": late, "up": up}))
    fleet.configure({"members": {}, "events_retry": [0.01]})
    async with fleet:
        with pytest.raises(AdapterUnavailable) as caught:
            await fleet.observe(BundleRef("anything"))
        assert caught.value.details["member"] == "late"
        assert "could not start" in caught.value.message
        assert (await fleet.apply(_plan("first"))).details["member"] == "up", "among those up"
        with anyio.fail_after(5):
            while late.tries < 3:  # noqa: ASYNC110 - the fleet starts it again on its own
                await anyio.sleep(0.01)
        assert (await fleet.apply(_plan("second"))).details["member"] == "late", "the roomier"


async def test_a_restarted_fleet_finds_every_app_where_it_is() -> None:
    a, b = _fake(8), _fake(8)
    async with _fleet(a=a.replica(), b=b.replica()) as fleet:
        homes = {
            f"app-{i}": (await fleet.apply(_plan(f"app-{i}"))).details["member"] for i in range(8)
        }
    assert set(homes.values()) == {"a", "b"}
    # Another process: the same runtimes, nothing in memory.
    async with _fleet(a=a.replica(), b=b.replica()) as restarted:
        for bundle_id, home in homes.items():
            assert await restarted.locate(bundle_id) == home
            assert (await restarted.apply(_plan(bundle_id))).details["member"] == home
        assert restarted.placements_in_flight == {}, "found, not placed"
    assert sorted(a.bundle_ids() + b.bundle_ids()) == sorted(homes)


async def test_placements_in_flight_spread_a_burst_over_members_of_equal_room() -> None:
    a, b = _fake(8), _fake(8)
    a.faults.add_latency("apply", 0.05)
    b.faults.add_latency("apply", 0.05)
    async with _fleet(a=a, b=b) as fleet, anyio.create_task_group() as group:
        for i in range(20):
            group.start_soon(fleet.apply, _plan(f"burst-{i}"))
    assert len(a.bundle_ids()) == len(b.bundle_ids()) == 10


# -- events --------------------------------------------------------------------------------


async def test_one_stream_carries_every_member_and_outlives_a_silent_one() -> None:
    a, b = _fake(8), _fake(8)
    fleet = FleetAdapter(source=_members({"a": a, "b": b}))
    fleet.configure({"members": {}, "events_retry": [0.01]})
    async with fleet, fleet.watch_bundles() as events:
        first = await anext(events)
        assert first.kind is BundleEventKind.WATCHING
        await fleet.apply(_plan("on-a", memory=GiB))
        await fleet.apply(_plan("on-b", memory=GiB))
        started: set[str | None] = set()
        with anyio.fail_after(5):
            while started != {"on-a", "on-b"}:
                event = await anext(events)
                if event.kind is BundleEventKind.STARTED:
                    started.add(event.bundle_id)
        home = await fleet.locate("on-a")
        fake = a if home == "a" else b
        fake.drop_event_streams()  # that member's stream is lost, then reopened
        with anyio.fail_after(5):
            event = await anext(events)
            while event.kind is not BundleEventKind.MISSED:
                event = await anext(events)
        assert event.bundle_id is None, "the contract's gap: the host re-observes every app"
        # Both members' events flow on in the same stream.
        for bundle_id in ("on-a", "on-b"):
            member = a if await fleet.locate(bundle_id) == "a" else b
            member.exit_workload(WorkloadRef(bundle_id, "web"), 3)
        seen: set[str | None] = set()
        with anyio.fail_after(5):
            while seen != {"on-a", "on-b"}:
                event = await anext(events)
                if event.kind is BundleEventKind.EXITED:
                    seen.add(event.bundle_id)
