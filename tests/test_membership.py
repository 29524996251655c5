"""Several host replicas on the fake runtime: ownership, handover, never two writers, singletons.

Lease timings are short and real (anyio's clock); nothing asserts on a duration: each
test waits for the state it expects, with a generous bound that only catches a hang.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence

import anyio
import pytest

import pando_runtime as pr
from pando_runtime.plugin import LeaseConflict, LeaseRecord, StoredLease
from pando_runtime.testing import FakeAdapter, FakeLeaseStore, FakeReplica

pytestmark = pytest.mark.anyio

SETTINGS = pr.MembershipSettings(lease_duration=1.2, renew_deadline=0.8, retry_period=0.1)
HANG = 10.0
IDS = [f"app-{n}" for n in range(30)]


def plan(bundle_id: str, image: str = "example/app:1") -> pr.BundlePlan:
    return pr.BundlePlan(bundle_id=bundle_id, workloads=(pr.WorkloadPlan(name="web", image=image),))


async def settled(memberships: Sequence[pr.Membership], ids: Iterable[str]) -> None:
    """Wait until the memberships agree on their members and each id has one owner."""
    ids = list(ids)
    names = {m.replica for m in memberships}
    with anyio.fail_after(HANG):
        while True:
            agree = all(m.members() == names for m in memberships)
            if agree and all(sum(m.owns(i) for m in memberships) == 1 for i in ids):
                return
            await anyio.sleep(SETTINGS.retry_period)


@contextlib.asynccontextmanager
async def never_two_writers(memberships: Sequence[pr.Membership]) -> AsyncIterator[list[str]]:
    """Check, at every scheduling point of the block, that no bundle has two owners."""
    seen: list[str] = []

    async def sample() -> None:
        while True:
            for bundle_id in IDS:
                owners = [m.replica for m in memberships if m.owns(bundle_id)]
                assert len(owners) <= 1, (bundle_id, owners)
            seen.append("sampled")
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        group.start_soon(sample)
        yield seen
        group.cancel_scope.cancel()


async def three(fake: FakeAdapter) -> tuple[FakeAdapter, FakeReplica, FakeReplica]:
    for bundle_id in IDS:
        await fake.apply(plan(bundle_id))
    return fake, fake.replica(), fake.replica()


async def test_a_host_that_never_joins_writes_every_bundle() -> None:
    fake = FakeAdapter()
    other = fake.replica()
    await fake.apply(plan("app-1"))
    await other.apply(plan("app-1", "example/app:2"))
    await other.destroy(pr.BundleRef("app-1"))
    assert fake.lease_store.writes == 0


async def test_a_lone_replica_owns_everything_and_is_told_so() -> None:
    fake = FakeAdapter()
    await fake.apply(plan("app-1"))
    async with fake.membership("a", SETTINGS) as membership, membership.changes() as changes:
        first = await changes.__anext__()
        assert first == pr.OwnershipChange(members=frozenset({"a"}), gained=frozenset({"app-1"}))
        assert membership.members() == {"a"}
        assert membership.owner("app-2") == "a"
        assert membership.owns("app-2")
        await fake.apply(plan("app-2"))
    assert fake.lease_store.leases("members") == {}, "leaving deletes the lease"


@pytest.mark.parametrize(
    ("replica", "settings", "paths"),
    [
        ("Replica_A", pr.MembershipSettings(), ["replica"]),
        (
            "a",
            pr.MembershipSettings(lease_duration=10, renew_deadline=10),
            ["settings.renew_deadline"],
        ),
        (
            "a",
            pr.MembershipSettings(lease_duration=5, renew_deadline=6, retry_period=5),
            ["settings.renew_deadline", "settings.retry_period"],
        ),
        (
            "",
            pr.MembershipSettings(retry_period=0, lease_duration=-1),
            ["replica", "settings.lease_duration", "settings.retry_period"],
        ),
    ],
)
async def test_bad_settings_are_refused_with_every_problem_at_its_path(
    replica: str, settings: pr.MembershipSettings, paths: list[str]
) -> None:
    fake = FakeAdapter()
    with pytest.raises(pr.InvalidConfig) as caught:
        async with fake.membership(replica, settings):
            pass
    assert [p.path for p in caught.value.problems] == paths
    assert caught.value.code == "INVALID_CONFIG"
    assert fake.lease_store.writes == 0


def test_the_defaults_are_client_gos() -> None:
    defaults = pr.MembershipSettings()
    assert (defaults.lease_duration, defaults.renew_deadline, defaults.retry_period) == (15, 10, 2)
    assert pr.plugin.validate_membership("a", defaults) == []


async def test_three_replicas_share_the_bundles_and_refuse_each_others() -> None:
    a, b, c = await three(FakeAdapter())
    async with (
        a.membership("a", SETTINGS) as ma,
        b.membership("b", SETTINGS) as mb,
        c.membership("c", SETTINGS) as mc,
    ):
        await settled([ma, mb, mc], IDS)
        for bundle_id in IDS:
            owner = pr.rendezvous_owner(bundle_id, ["a", "b", "c"])
            assert {m.owner(bundle_id) for m in (ma, mb, mc)} == {owner}
        foreign = next(i for i in IDS if mb.owns(i))
        writes = a.writes
        with pytest.raises(pr.NotOwner) as caught:
            await a.apply(plan(foreign, "example/app:2"))
        assert caught.value.details == {"replica": "a", "bundle_id": foreign, "owner": "b"}
        with pytest.raises(pr.NotOwner):
            await a.stop(pr.BundleRef(foreign))
        with pytest.raises(pr.NotOwner):
            await c.destroy(pr.BundleRef(foreign))
        assert a.writes == writes, "a refused write changes nothing"
        await b.apply(plan(foreign, "example/app:2"))
        with ma.override(foreign):
            await a.apply(plan(foreign, "example/app:3"))
        assert a.plan_of(foreign).workloads[0].image == "example/app:3"
        with pytest.raises(pr.NotOwner):
            await a.apply(plan(foreign, "example/app:4"))


async def test_a_killed_replicas_bundles_move_after_its_lease_and_never_to_two() -> None:
    a, b, c = await three(FakeAdapter())
    async with (
        a.membership("a", SETTINGS) as ma,
        b.membership("b", SETTINGS) as mb,
        c.membership("c", SETTINGS) as mc,
    ):
        await settled([ma, mb, mc], IDS)
        bs = {i for i in IDS if mb.owns(i)}
        async with never_two_writers([ma, mb, mc]) as seen, ma.changes() as changes:
            await changes.__anext__()
            b.kill()
            with pytest.raises(pr.NotOwner) as caught:
                await b.apply(plan(min(bs), "example/app:2"))
            assert caught.value.details["owner"] is None
            gained: set[str] = set()
            with anyio.fail_after(HANG):
                async for change in changes:
                    gained |= change.gained
                    if change.members == {"a", "c"} and not change.lost and gained:
                        break
            await settled([ma, mc], IDS)
            assert seen
        assert gained == {i for i in bs if pr.rendezvous_owner(i, ["a", "c"]) == "a"}
        assert {i for i in IDS if ma.owns(i) or mc.owns(i)} == set(IDS)


async def test_a_join_is_drained_and_a_leave_hands_over() -> None:
    a, b, c = await three(FakeAdapter())
    async with a.membership("a", SETTINGS) as ma, b.membership("b", SETTINGS) as mb:
        await settled([ma, mb], IDS)
        async with never_two_writers([ma, mb]) as seen:
            async with c.membership("c", SETTINGS) as mc:
                async with never_two_writers([ma, mb, mc]):
                    await settled([ma, mb, mc], IDS)
                moving = {i for i in IDS if mc.owns(i)}
                assert moving == {i for i in IDS if pr.rendezvous_owner(i, "abc") == "c"}
            await settled([ma, mb], IDS)
            assert seen


async def held_write(
    membership: pr.Membership,
    bundle_id: str,
    released: anyio.Event,
    *,
    task_status: anyio.abc.TaskStatus[None],
) -> None:
    """A write of several calls of ``bundle_id``, in flight until ``released`` is set."""
    async with membership.writing(bundle_id):
        task_status.started()
        await released.wait()


@contextlib.asynccontextmanager
async def joining_during_a_write() -> AsyncIterator[
    tuple[pr.Membership, pr.Membership, str, anyio.Event]
]:
    """``a`` owns every bundle and has a write of one in flight; ``c`` joins, to whom that
    bundle moves. Yields (a's membership, c's, the bundle, the event that ends a's write)."""
    a, _, c = await three(FakeAdapter())
    moving = next(i for i in IDS if pr.rendezvous_owner(i, "ac") == "c")
    written = anyio.Event()
    async with a.membership("a", SETTINGS) as ma, anyio.create_task_group() as group:
        await settled([ma], IDS)
        await group.start(held_write, ma, moving, written)
        async with c.membership("c", SETTINGS) as mc:
            yield ma, mc, moving, written


async def test_a_join_waits_for_the_old_owners_write_in_flight_then_hands_over() -> None:
    async with joining_during_a_write() as (ma, mc, moving, written):
        with anyio.fail_after(HANG):  # a lets the bundle go at once...
            while ma.owns(moving):  # noqa: ASYNC110 - ownership changes have no event
                await anyio.sleep(SETTINGS.retry_period)
        for _ in range(4):  # ...but c takes it only once a's write has ended
            await anyio.sleep(SETTINGS.retry_period)
            assert not mc.owns(moving)
        written.set()
        await settled([ma, mc], IDS)
        with pytest.raises(pr.NotOwner):
            async with ma.writing(moving):
                pass


async def test_a_write_outlasting_the_renew_deadline_still_holds_the_handover() -> None:
    # A busy process: the old owner's apply takes longer than the renew deadline. It keeps its
    # lease renewed with the view it published, so the bundle stays its own (and nobody's
    # else) until the write ends; it never hands an app over mid-write.
    async with joining_during_a_write() as (ma, mc, moving, written):
        waited = 0.0
        while waited < 3 * SETTINGS.renew_deadline:
            await anyio.sleep(SETTINGS.retry_period)
            waited += SETTINGS.retry_period
            assert not mc.owns(moving), f"taken over after {waited:.1f} s, mid-write"
            assert "a" in mc.members(), "the old owner stays a live member"
        written.set()
        await settled([ma, mc], IDS)
        assert mc.owns(moving)


async def test_a_cut_off_replica_stops_writing_and_rejoins_writing_nothing_stale() -> None:
    a, b, _ = await three(FakeAdapter())
    async with a.membership("a", SETTINGS) as ma, b.membership("b", SETTINGS) as mb:
        await settled([ma, mb], IDS)
        async with mb.changes() as changes, ma.changes() as a_changes:
            first = await changes.__anext__()
            b.cut_off()
            with anyio.fail_after(HANG):
                lost = await changes.__anext__()
            assert lost.lost == first.gained
            assert lost.members == frozenset()
            assert not any(mb.owns(i) for i in IDS)
            assert mb.owner(IDS[0]) is None
            with pytest.raises(pr.NotOwner):
                await b.apply(plan(min(first.gained)))
            with anyio.fail_after(HANG):
                while not all(ma.owns(i) for i in IDS):
                    await a_changes.__anext__()
            b.reconnect()
            await settled([ma, mb], IDS)


async def test_a_singleton_runs_on_one_replica_and_moves_when_its_holder_dies() -> None:
    a, b, c = await three(FakeAdapter())
    holders: list[str] = []
    running = {"now": 0}
    entered = anyio.Event()

    async def job(adapter: pr.RuntimeAdapter, replica: str) -> None:
        async with adapter.membership(replica, SETTINGS) as membership:
            with contextlib.suppress(pr.NotOwner):
                async with membership.singleton("catalog-sync"):
                    running["now"] += 1
                    assert running["now"] == 1, "one holder at a time"
                    holders.append(replica)
                    entered.set()
                    try:
                        await anyio.sleep_forever()
                    finally:
                        running["now"] -= 1

    replicas = {"a": a, "b": b, "c": c}
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as group:
            for name, adapter in replicas.items():
                group.start_soon(job, adapter, name)
            await entered.wait()
            first = holders[0]
            entered = anyio.Event()
            replicas[first].kill()  # type: ignore[attr-defined]
            await entered.wait()
            assert len(holders) == 2
            assert holders[1] != first
            group.cancel_scope.cancel()


async def test_a_released_singleton_is_taken_at_once_and_bad_names_are_refused() -> None:
    fake = FakeAdapter()
    other = fake.replica()
    async with fake.membership("a", SETTINGS) as ma, other.membership("b", SETTINGS) as mb:
        with pytest.raises(pr.InvalidInput):
            async with ma.singleton("Not A Name"):
                pass
        async with ma.singleton("canary"):
            assert set(fake.lease_store.leases("singletons")) == {"canary"}
        with anyio.fail_after(HANG):
            async with mb.singleton("canary"):
                assert fake.lease_store.leases("singletons")["canary"].holder == "b"


async def test_one_membership_per_adapter_and_an_unsupported_adapter_says_so() -> None:
    fake = FakeAdapter()
    async with fake.membership("a", SETTINGS):
        with pytest.raises(pr.InvalidInput):
            async with fake.membership("b", SETTINGS):
                pass
    narrow = FakeAdapter(capabilities=pr.RuntimeCapabilities())
    with pytest.raises(pr.CapabilityUnsupported) as caught:
        narrow.membership("a")
    assert caught.value.capability == "membership"


async def test_a_tenure_holds_while_a_bundle_stays_and_changes_when_it_comes_back() -> None:
    a, b, _ = await three(FakeAdapter())
    async with a.membership("a", SETTINGS) as ma:
        await settled([ma], IDS)
        before = {i: ma.tenure(i) for i in IDS}
        assert None not in before.values(), "a lone replica owns every bundle"
        async with b.membership("b", SETTINGS) as mb:
            await settled([ma, mb], IDS)
            staying = [i for i in IDS if ma.owns(i)]
            moved = [i for i in IDS if mb.owns(i)]
            assert staying
            assert moved
            assert all(ma.tenure(i) == before[i] for i in staying), "kept: the same tenure"
            assert all(ma.tenure(i) is None for i in moved), "not owned: no tenure"
        await settled([ma], IDS)
        assert all(ma.tenure(i) == before[i] for i in staying)
        assert all(ma.tenure(i) not in (None, before[i]) for i in moved), "gained again: new"


class RefusingStore:
    """A lease store whose runtime refuses one call with a reason, as a real runtime would."""

    def __init__(
        self, refuse: str, error: pr.PandoRuntimeError, groups: tuple[str, ...] = ("members",)
    ) -> None:
        self.leases = FakeLeaseStore()
        self.refuse = refuse
        self.error = error
        self.groups = groups

    async def list_leases(self, group: str) -> tuple[StoredLease, ...]:
        if self.refuse == "list" and group in self.groups:
            raise self.error
        return await self.leases.list_leases(group)

    async def write_lease(
        self, group: str, name: str, record: LeaseRecord, *, version: str | None
    ) -> StoredLease:
        if self.refuse == "write" and group in self.groups:
            raise self.error
        return await self.leases.write_lease(group, name, record, version=version)

    async def delete_lease(self, group: str, name: str, *, version: str) -> None:
        await self.leases.delete_lease(group, name, version=version)


async def _no_bundles() -> list[str]:
    return []


@pytest.mark.parametrize(
    ("refuse", "error", "doing"),
    [
        (
            "write",
            pr.AdapterFailed("namespace 'hosts' does not exist", remedy="Create namespace hosts."),
            "could not write its lease",
        ),
        (
            "list",
            pr.AdapterUnavailable("you may not list leases", remedy="Grant 'list' on leases."),
            "could not read the members' leases",
        ),
    ],
)
async def test_a_refused_join_says_what_the_runtime_answered_and_its_remedy(
    refuse: str, error: pr.PandoRuntimeError, doing: str
) -> None:
    store = RefusingStore(refuse, error)
    with pytest.raises(type(error)) as caught:
        async with pr.Membership(store, "ra", SETTINGS, bundles=_no_bundles):
            pass
    assert caught.value.message == f"replica 'ra' {doing}: {error.message}"
    assert caught.value.remedy == error.remedy
    assert caught.value.details["replica"] == "ra"
    assert not store.leases.leases("members"), "nothing written"


async def test_a_join_that_gets_no_answer_says_so_and_a_name_taken_meanwhile_is_a_conflict() -> (
    None
):
    class Silent(RefusingStore):
        async def write_lease(
            self, group: str, name: str, record: LeaseRecord, *, version: str | None
        ) -> StoredLease:
            await anyio.sleep_forever()
            raise AssertionError  # pragma: no cover

    with pytest.raises(pr.AdapterUnavailable) as caught:
        async with pr.Membership(
            Silent("", pr.AdapterFailed("")), "ra", SETTINGS, bundles=_no_bundles
        ):
            pass
    assert "did not answer within the renew deadline (0.8 s)" in caught.value.message
    conflict = LeaseConflict("lease members/ra is not at version None", details={"lease": "ra"})
    with pytest.raises(pr.AdapterFailed) as taken:
        async with pr.Membership(
            RefusingStore("write", conflict), "ra", SETTINGS, bundles=_no_bundles
        ):
            pass
    assert "another process wrote the same lease" in taken.value.message
    assert "name of its own" in taken.value.remedy
    assert taken.value.details["conflict"] is True


async def test_a_singleton_whose_renewal_is_refused_is_lost_saying_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    refused = pr.AdapterFailed("you may not update leases", remedy="Grant 'update' on leases.")
    store = RefusingStore("", refused, groups=("singletons",))
    async with pr.Membership(store, "ra", SETTINGS, bundles=_no_bundles) as membership:

        async def hold_while_refused() -> None:
            async with membership.singleton("job"):
                store.refuse = "write"
                await anyio.sleep(HANG)

        with pytest.raises(pr.NotOwner) as lost:
            await hold_while_refused()
        assert "(the last renewal: you may not update leases)" in lost.value.message
        assert lost.value.remedy == refused.remedy
        # Waiting for it again: the reason is logged once, with its remedy.
        with anyio.move_on_after(SETTINGS.retry_period * 5):
            async with membership.singleton("job"):
                pytest.fail("a refused singleton was taken")
    said = [r.getMessage() for r in caplog.records if "not taken yet" in r.getMessage()]
    assert said == [
        (
            "singleton job: not taken yet, retrying: you may not update leases "
            "(remedy: Grant 'update' on leases.)"
        )
    ]
