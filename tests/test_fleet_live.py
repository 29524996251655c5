"""A fleet whose members change while it runs, shown on fakes (``pando_runtime.fleet._live``).

The same mechanism runs over real clusters from remote secrets in the Kubernetes suite
(``adapters/kubernetes/tests/test_cluster_remote_secrets.py``). Each member here is a replica of
a fake runtime kept outside the fleet, so a member's adapter can be replaced (a rotated
credential) or closed (left) while its runtime stays.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Self

import anyio
import pytest
from anyio.abc import TaskStatus

from pando_runtime import (
    AdapterUnavailable,
    BundleEvent,
    BundleEventKind,
    BundlePlan,
    BundleRef,
    Resources,
    WorkloadPlan,
    WorkloadRef,
)
from pando_runtime.fleet import FleetAdapter, FleetMembers, MemberChanges, Reservations
from pando_runtime.testing import FakeAdapter

pytestmark = pytest.mark.anyio

GiB = 1024**3
MiB = 1024**2


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # nothing here differs between backends


def _plan(bundle_id: str, *, first_deploy: bool = True) -> BundlePlan:
    web = WorkloadPlan(
        name="web",
        image="registry.example/app:1",
        resources=Resources(memory_bytes=256 * MiB),
    )
    return BundlePlan(bundle_id=bundle_id, workloads=(web,), first_deploy=first_deploy)


def _runtime(memory_gib: int) -> FakeAdapter:
    return FakeAdapter({"nodes": 1, "node_memory_bytes": memory_gib * GiB})


class _Scripted:
    """A live member source the test drives: it hands the fleet's changes to the test."""

    def __init__(self, first: dict[str, Any]) -> None:
        self.first = first
        self.changes: MemberChanges | None = None

    async def open(self) -> FleetMembers:
        return FleetMembers(adapters=self.first, control=next(iter(self.first)))

    async def follow(
        self, changes: MemberChanges, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self.changes = changes
        task_status.started()
        await anyio.sleep_forever()


class _NeverStarts(FakeAdapter):
    """A member whose runtime never answers (an unreachable cluster)."""

    async def __aenter__(self) -> Self:
        raise AdapterUnavailable("the runtime does not answer")


async def _next(events: AsyncIterator[BundleEvent], kind: BundleEventKind) -> BundleEvent:
    """The next event of ``kind``; every event on the way is checked not to be ``MISSED``."""
    with anyio.fail_after(10):
        async for event in events:
            assert event.kind is not BundleEventKind.MISSED, "a member change lost events"
            if event.kind is kind:
                return event
    pytest.fail(f"the stream ended before a {kind} event")


@pytest.fixture
async def runtimes() -> AsyncIterator[tuple[FakeAdapter, FakeAdapter]]:
    small, big = _runtime(4), _runtime(64)
    yield small, big
    await small.aclose()
    await big.aclose()


async def test_a_member_joins_is_replaced_and_leaves_while_the_fleet_runs(
    runtimes: tuple[FakeAdapter, FakeAdapter],
) -> None:
    small, big = runtimes
    source = _Scripted({"home": small.replica()})
    fleet = FleetAdapter(source=source)
    async with fleet, fleet.watch_bundles() as events:
        assert (await anext(events)).kind is BundleEventKind.WATCHING
        changes = source.changes
        assert changes is not None

        # Joined: it is followed, said, and placement uses it (the roomiest).
        first = big.replica()
        await changes.join("big", first)
        joined = await _next(events, BundleEventKind.FLEET_CHANGED)
        assert joined.details == {"change": "joined", "member": "big"}
        handle = await fleet.apply(_plan("shop"))
        assert handle.details["member"] == "big"

        # Replaced (a rotated credential): the app's view stays, events flow from the new
        # adapter, the old one is closed, and nothing was missed on the way.
        second = big.replica()
        await changes.replace("big", second)
        replaced = await _next(events, BundleEventKind.FLEET_CHANGED)
        assert replaced.details == {"change": "replaced", "member": "big"}
        assert fleet.members["big"] is second
        assert first.closed
        assert (await fleet.observe(BundleRef("shop"))).exists
        big.set_health(WorkloadRef("shop", "web"), healthy=False)
        health = await _next(events, BundleEventKind.HEALTH_CHANGED)
        assert health.bundle_id == "shop"

        # Left: its apps are unavailable naming it, never absent; nothing goes there again.
        await changes.leave("big")
        left = await _next(events, BundleEventKind.FLEET_CHANGED)
        assert left.details == {
            "change": "left",
            "member": "big",
            "reason": "1 bundles unavailable",
        }
        assert second.closed
        with pytest.raises(AdapterUnavailable) as caught:
            await fleet.observe(BundleRef("shop"))
        assert caught.value.details["member"] == "big"
        assert "left the fleet" in caught.value.message
        with pytest.raises(AdapterUnavailable):  # not a first deploy: it may be there
            await fleet.apply(_plan("shop", first_deploy=False))
        assert (await fleet.apply(_plan("cart"))).details["member"] == "home"
        assert "big" not in fleet.members


async def test_an_unreachable_member_or_definition_holds_up_nothing(
    runtimes: tuple[FakeAdapter, FakeAdapter],
) -> None:
    small, big = runtimes
    source = _Scripted({"home": small.replica(), "big": big.replica()})
    fleet = FleetAdapter(source=source)
    fleet.configure({"members": {}, "events_retry": [0.05], "join_wait": 0.5})
    async with fleet, fleet.watch_bundles() as events:
        await anext(events)
        changes = source.changes
        assert changes is not None
        await fleet.apply(_plan("shop"))

        # A member that never starts joins as a silent one; the others serve on.
        await changes.join("lost", _NeverStarts())
        joined = await _next(events, BundleEventKind.FLEET_CHANGED)
        assert joined.details["change"] == "joined"
        assert "not started" in joined.details["reason"]
        assert (await fleet.observe(BundleRef("shop"))).exists
        with pytest.raises(AdapterUnavailable) as caught:
            await fleet.observe(BundleRef("nowhere"))  # it may be on the silent one
        assert caught.value.details["member"] == "lost"

        # A name taken, and a new definition that does not start: refused, the old one serves.
        await changes.join("big", big.replica())
        taken = await _next(events, BundleEventKind.FLEET_CHANGED)
        assert taken.details["change"] == "refused"
        serving = fleet.members["big"]
        await changes.replace("big", _NeverStarts())
        kept = await _next(events, BundleEventKind.FLEET_CHANGED)
        assert kept.details["change"] == "refused"
        assert "the old one serves on" in kept.details["reason"]
        assert fleet.members["big"] is serving
        assert (await fleet.observe(BundleRef("shop"))).exists


def _members_file(path: Path, **members: dict[str, Any]) -> None:
    path.write_text(json.dumps({"members": members}))


async def test_members_from_a_file_join_change_and_leave_as_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "members.yaml"
    big = {"adapter": "fake", "settings": {"node_memory_bytes": 64 * GiB}}
    _members_file(path, big=big)
    fleet = FleetAdapter(
        {
            "members": {"home": {"adapter": "fake", "settings": {"node_memory_bytes": 4 * GiB}}},
            "members_file": str(path),
            "members_file_poll": 0.05,
        }
    )
    async with fleet, fleet.watch_bundles() as events:
        assert set(fleet.members) == {"home", "big"}  # the file's joined before it answered
        await anext(events)
        assert (await fleet.apply(_plan("shop"))).details["member"] == "big"

        # An entry changed: replaced. A bad one, and a settings member's name: refused, each
        # at its path, the rest as it was.
        _members_file(path, big={**big, "settings": {"node_memory_bytes": 32 * GiB}})
        assert (await _next(events, BundleEventKind.FLEET_CHANGED)).details["change"] == "replaced"
        serving = fleet.members["big"]
        _members_file(
            path,
            big={**big, "settings": {"node_memory_bytes": -1}},
            home={"adapter": "fake"},
        )
        refused = [await _next(events, BundleEventKind.FLEET_CHANGED) for _ in range(2)]
        reasons = sorted(e.details["reason"] for e in refused)
        assert {e.details["change"] for e in refused} == {"refused"}
        assert "members['big'].settings.node_memory_bytes" in reasons[0]
        assert "a member of the settings has that name" in reasons[1]
        assert fleet.members["big"] is serving

        # Removed from the file: it leaves.
        _members_file(path)
        left = await _next(events, BundleEventKind.FLEET_CHANGED)
        assert (left.details["change"], left.details["member"]) == ("left", "big")
        assert set(fleet.members) == {"home"}


def test_a_member_that_leaves_holds_no_room_any_more() -> None:
    reservations = Reservations(clock=lambda: 0.0)
    reservations.reserve("shop", "big", (100, 1 << 20))
    reservations.reserve("cart", "home", (100, 1 << 20))
    reservations.drop_member("big")
    assert reservations.members() == {"cart": "home"}
