"""Conformance: several host replicas (``membership``).

The tests join with the harness's short ``membership_settings`` and unique replica names.
Those with two replicas need the harness's ``replica`` hook; a crash is the contract's own
``Membership.crash()``. Nothing asserts on a duration: each test waits (up to the
harness's timeout) for the state it expects.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio
import pytest
from anyio.abc import TaskStatus

from ..._adapter._abc import RuntimeAdapter
from ..._contract._capabilities import Capability
from ..._contract._errors import InvalidConfig, NotOwner
from ..._contract._plans import BundlePlan
from ..._contract._refs import BundleRef
from ..._replicas._membership import Membership
from ..._replicas._ownership import rendezvous_owner
from ..._replicas._settings import MembershipSettings, OwnershipChange
from ._base import ConformanceBase, Kit, since

__all__ = ["MembershipConformance"]

_CANDIDATES = 64
"""Bundle ids tried to find one that rendezvous hashing gives to a chosen replica."""


def _owned_by(kit: Kit, owner: str, members: list[str]) -> str:
    """A fresh bundle id that ``members`` give to ``owner``."""
    for _ in range(_CANDIDATES):
        bundle_id = kit.new_id("member")
        if rendezvous_owner(bundle_id, members) == owner:
            return bundle_id
    pytest.fail(f"no bundle id of {_CANDIDATES} went to {owner!r}")


async def _members_are(kit: Kit, names: set[str], *memberships: Membership) -> None:
    async def agree() -> bool:
        return all(m.members() == names for m in memberships)

    await kit.eventually(agree, f"every replica to see the members {sorted(names)}")


async def _owns(kit: Kit, membership: Membership, bundle_id: str) -> None:
    async def owns() -> bool:
        return membership.owns(bundle_id)

    await kit.eventually(owns, f"{membership.replica} to own {bundle_id}")


@contextlib.asynccontextmanager
async def _replica(kit: Kit) -> AsyncIterator[RuntimeAdapter]:
    async with kit.harness.replica(kit.adapter) as other:
        yield other


@contextlib.asynccontextmanager
async def _two_replicas(
    kit: Kit,
) -> AsyncIterator[tuple[RuntimeAdapter, str, str, Membership, Membership]]:
    """The adapter under test and a second replica, joined as ``a`` and ``b``.

    Yields ``(other, a, b, ma, mb)``: the second replica, both names, both memberships.
    """
    a, b = kit.new_id("replica"), kit.new_id("replica")
    settings = kit.harness.membership_settings
    async with (
        _replica(kit) as other,
        kit.adapter.membership(a, settings) as ma,
        other.membership(b, settings) as mb,
    ):
        yield other, a, b, ma, mb


class MembershipConformance(ConformanceBase):
    """``membership``: one owner per bundle, refused writes, handover, singletons."""

    gate = (Capability.MEMBERSHIP,)

    def _settings(self, kit: Kit) -> MembershipSettings:
        return kit.harness.membership_settings

    @since("1.2")
    async def test_a_lone_replica_owns_every_bundle_and_is_told_so(self, kit: Kit) -> None:
        plan = kit.plan()
        await kit.apply(plan)
        name = kit.new_id("replica")
        async with kit.adapter.membership(name, self._settings(kit)) as membership:
            await _members_are(kit, {name}, membership)
            assert membership.owner(plan.bundle_id) == name
            assert membership.owns(kit.new_id())
            async with membership.changes() as changes:
                with anyio.fail_after(kit.harness.timeout):
                    first = await anext(changes)
            assert isinstance(first, OwnershipChange)
            assert plan.bundle_id in first.gained
            assert not first.lost
            await kit.apply(kit.plan(bundle_id=plan.bundle_id, volumes=plan.volumes))

    @since("1.2")
    async def test_bad_settings_are_refused_with_each_problem_at_its_path(self, kit: Kit) -> None:
        bad = MembershipSettings(lease_duration=2.0, renew_deadline=3.0, retry_period=0.0)
        with pytest.raises(InvalidConfig) as caught:
            async with kit.adapter.membership("Not_A_Label", bad):
                pass
        paths = [p.path for p in caught.value.problems]
        assert paths == ["replica", "settings.retry_period"], paths

    @since("1.2")
    async def test_two_replicas_agree_and_refuse_each_others_writes(self, kit: Kit) -> None:
        kit.needs("replica")
        async with _two_replicas(kit) as (other, a, b, ma, mb):
            await _members_are(kit, {a, b}, ma, mb)
            plan = kit.plan(bundle_id=_owned_by(kit, b, [a, b]))
            await _owns(kit, mb, plan.bundle_id)
            assert ma.owner(plan.bundle_id) == b
            assert not ma.owns(plan.bundle_id)
            with pytest.raises(NotOwner) as caught:
                await kit.apply(plan)
            assert caught.value.details["owner"] == b
            assert not (await kit.observe(plan)).exists, "a refused apply writes nothing"
            await other.apply(plan)
            with pytest.raises(NotOwner):
                await kit.adapter.stop(BundleRef(plan.bundle_id))
            with pytest.raises(NotOwner):
                await kit.adapter.destroy(BundleRef(plan.bundle_id))
            assert (await kit.observe(plan)).exists
            with ma.override(plan.bundle_id):
                await kit.adapter.stop(BundleRef(plan.bundle_id))

    @since("1.2")
    async def test_a_crashed_replicas_bundles_move_after_its_lease(self, kit: Kit) -> None:
        kit.needs("replica")
        async with _two_replicas(kit) as (other, a, b, ma, mb):
            await _members_are(kit, {a, b}, ma, mb)
            plan: BundlePlan = kit.plan(bundle_id=_owned_by(kit, b, [a, b]))
            await _owns(kit, mb, plan.bundle_id)
            await other.apply(plan)
            kit.track(plan.bundle_id)
            mb.crash()
            assert not mb.owns(plan.bundle_id), "a crashed replica writes nothing"
            with pytest.raises(NotOwner):
                await other.apply(plan)
            await _owns(kit, ma, plan.bundle_id)
            assert ma.members() == {a}
            await kit.apply(plan)

    @since("1.2")
    async def test_a_leaving_replica_hands_over_and_its_stream_ends(self, kit: Kit) -> None:
        kit.needs("replica")
        a, b = kit.new_id("replica"), kit.new_id("replica")
        settings = self._settings(kit)
        ended = anyio.Event()

        async def follow(membership: Membership, *, task_status: TaskStatus[None]) -> None:
            async with membership.changes() as changes:
                await anext(changes)
                task_status.started()
                async for _ in changes:
                    pass
            ended.set()

        async with (
            _replica(kit) as other,
            kit.adapter.membership(a, settings) as ma,
            anyio.create_task_group() as group,
        ):
            async with other.membership(b, settings) as mb:
                await _members_are(kit, {a, b}, ma, mb)
                bundle_id = _owned_by(kit, b, [a, b])
                await _owns(kit, mb, bundle_id)
                await group.start(follow, mb)
            assert not mb.owns(bundle_id), "a replica that left writes nothing"
            with anyio.fail_after(kit.harness.timeout):
                await ended.wait()
            await _owns(kit, ma, bundle_id)

    @since("1.2")
    async def test_a_singleton_runs_on_one_replica_and_is_handed_over(self, kit: Kit) -> None:
        kit.needs("replica")
        singleton = kit.new_id("singleton")
        inside: list[str] = []
        async with _two_replicas(kit) as (_, a, b, ma, mb):
            with anyio.fail_after(kit.harness.timeout):
                async with ma.singleton(singleton):
                    inside.append(a)
                    with anyio.move_on_after(kit.harness.quiet_period):
                        async with mb.singleton(singleton):
                            inside.append(b)
                    assert inside == [a], "one holder at a time"
            with anyio.fail_after(kit.harness.timeout):
                async with mb.singleton(singleton):  # released: taken at once
                    inside.append(b)
        assert inside == [a, b]

    @since("1.2")
    async def test_a_crashed_holders_singleton_is_taken_after_its_lease(self, kit: Kit) -> None:
        kit.needs("replica")
        singleton = kit.new_id("singleton")
        ended: list[BaseException] = []
        async with _two_replicas(kit) as (_, _, _, ma, mb):
            held = anyio.Event()

            async def hold() -> None:
                try:
                    async with ma.singleton(singleton):
                        held.set()
                        await anyio.sleep_forever()
                except NotOwner as error:
                    ended.append(error)

            with anyio.fail_after(kit.harness.timeout):
                async with anyio.create_task_group() as group:
                    group.start_soon(hold)
                    await held.wait()
                    ma.crash()
                    async with mb.singleton(singleton):
                        assert ended, "the crashed holder's block ended first"
        assert isinstance(ended[0], NotOwner)
