"""The ownership function: rendezvous hashing moves as few bundles as it can, and spreads them."""

from __future__ import annotations

from collections import Counter

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pando_runtime as pr
from pando_runtime._replicas._ownership import OwnershipHistory, OwnershipView

names = st.from_regex(r"[a-z][a-z0-9-]{0,8}[a-z0-9]", fullmatch=True)
members_sets = st.frozensets(names, min_size=1, max_size=8)
keys = st.lists(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,20}", fullmatch=True), max_size=60)


def test_no_members_own_nothing_and_one_member_owns_everything() -> None:
    assert pr.rendezvous_owner("app", []) is None
    assert pr.rendezvous_owner("app", ["a"]) == "a"


@given(members_sets, keys)
def test_the_owner_is_a_member_and_does_not_depend_on_the_order(
    members: frozenset[str], ids: list[str]
) -> None:
    for bundle_id in ids:
        owner = pr.rendezvous_owner(bundle_id, sorted(members))
        assert owner in members
        assert pr.rendezvous_owner(bundle_id, sorted(members, reverse=True)) == owner


@given(members_sets, names, keys)
def test_on_a_join_only_bundles_moving_to_the_new_member_move(
    members: frozenset[str], joining: str, ids: list[str]
) -> None:
    after = members | {joining}
    for bundle_id in ids:
        before_owner = pr.rendezvous_owner(bundle_id, members)
        after_owner = pr.rendezvous_owner(bundle_id, after)
        assert after_owner in (before_owner, joining), bundle_id


@given(members_sets, keys)
def test_on_a_leave_only_the_leavers_bundles_move(members: frozenset[str], ids: list[str]) -> None:
    leaving = min(members)
    after = members - {leaving}
    for bundle_id in ids:
        before_owner = pr.rendezvous_owner(bundle_id, members)
        if before_owner != leaving:
            assert pr.rendezvous_owner(bundle_id, after) == before_owner


@pytest.mark.parametrize("count", [2, 3, 5])
def test_ten_thousand_bundles_spread_evenly(count: int) -> None:
    members = [f"replica-{i}" for i in range(count)]
    owners = Counter(pr.rendezvous_owner(f"app-{n}", members) for n in range(10_000))
    fair = 10_000 / count
    assert set(owners) == set(members)
    for member, owned in owners.items():
        assert abs(owned - fair) <= 0.05 * fair, (member, owned, fair)


def test_a_join_moves_about_its_share() -> None:
    ids = [f"app-{n}" for n in range(10_000)]
    before = {i: pr.rendezvous_owner(i, ["a", "b"]) for i in ids}
    after = {i: pr.rendezvous_owner(i, ["a", "b", "c"]) for i in ids}
    moved = [i for i in ids if before[i] != after[i]]
    assert all(after[i] == "c" for i in moved)
    assert abs(len(moved) - 10_000 / 3) <= 0.05 * 10_000 / 3


def _owned(view: OwnershipView, ids: list[str]) -> set[str]:
    return {i for i in ids if view.owns(i)}


def test_a_view_owns_nothing_another_live_replica_claims_nor_anything_when_not_fresh() -> None:
    ids = [f"app-{n}" for n in range(200)]
    alone = OwnershipView(me="a", view=frozenset({"a"}), fresh=True)
    assert _owned(alone, ids) == set(ids)
    assert _owned(attrs.evolve(alone, fresh=False), ids) == set()
    assert alone.owner("app-1") == "a"
    assert attrs.evolve(alone, fresh=False).owner("app-1") is None
    # b joined and published {a, b}; a has not adopted it yet: what b claims is nobody's
    claimed = {i for i in ids if pr.rendezvous_owner(i, ["a", "b"]) == "b"}
    waiting = attrs.evolve(alone, others={"b": frozenset({"a", "b"})})
    assert _owned(waiting, ids) == set(ids) - claimed
    # b, for its part, acts on nothing a's published view still gives a
    joining = OwnershipView(
        me="b", view=frozenset({"a", "b"}), others={"a": frozenset({"a"})}, fresh=True
    )
    assert _owned(joining, ids) == set()
    drained = attrs.evolve(joining, others={"a": frozenset({"a", "b"})})
    assert _owned(drained, ids) == claimed


def test_dropping_a_view_loses_what_moves_and_gains_nothing() -> None:
    ids = [f"app-{n}" for n in range(200)]
    old = OwnershipView(me="a", view=frozenset({"a", "b"}), fresh=True)
    dropping = attrs.evolve(old, dropping=frozenset({"a", "b", "c"}))
    gained, lost = dropping.changed(old, ids)
    assert not gained
    assert lost == {i for i in ids if old.owns(i) and pr.rendezvous_owner(i, "abc") == "c"}
    assert dropping.members == {"a", "b", "c"}


def _bundle_of(owner: str, members: list[str]) -> str:
    return next(f"app-{n}" for n in range(256) if pr.rendezvous_owner(f"app-{n}", members) == owner)


def test_a_tenure_lasts_while_the_bundle_stays_owned_and_a_regain_starts_another() -> None:
    bundle_id = _bundle_of("b", ["a", "b"])  # a owns it alone; b takes it while it is there
    alone = OwnershipView(me="a", view=frozenset({"a"}), fresh=True)
    shared = OwnershipView(me="a", view=frozenset({"a", "b"}), fresh=True)
    history = OwnershipHistory()
    history.record(alone)
    first = history.tenure(bundle_id)
    history.record(alone)  # the same view again: no change
    history.record(attrs.evolve(alone, others={"c": frozenset({"a"})}))  # still a's
    assert history.tenure(bundle_id) == first, "kept without a break: the same tenure"
    history.record(shared)  # lost to b
    history.record(alone)  # b left: a owns it again
    assert history.tenure(bundle_id) != first, "lost and gained again: a new tenure"
    again = history.tenure(bundle_id)
    history.record(attrs.evolve(alone, fresh=False))  # a's own lease went stale
    history.record(alone)
    assert history.tenure(bundle_id) not in (first, again)


def test_a_tenure_older_than_the_history_kept_reads_as_a_new_one() -> None:
    history = OwnershipHistory(limit=2)
    history.record(OwnershipView(me="a", view=frozenset({"a"}), fresh=True))
    first = history.tenure("app")
    for other in ("c", "d"):  # views that keep "app" a's, until the first is dropped
        history.record(
            OwnershipView(me="a", view=frozenset({"a"}), others={other: frozenset()}, fresh=True)
        )
    assert history.tenure("app") != first, "safe: taken for a new tenure, never a stale one"
