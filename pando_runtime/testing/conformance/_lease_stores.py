"""Conformance: the rules every lease store keeps, as tests any store's suite runs.

Subclass :class:`LeaseStoreConformance` and give a ``lease_stores`` fixture yielding two
clients of one store (two connections, as two replicas have): what one wrote, the other must
read. The store may hold other leases (a shared database): each test uses names of its own.
The rules (``LeaseStore``'s docstring): reads see every finished write, versions never repeat
even after a delete and a re-create, and a write at a version is conditional on it. Every read
a test makes is made both ways, one lease alone (``read_lease``) and its group's list, and the
two must agree: each rule holds for both.
"""

from __future__ import annotations

import uuid

import anyio
import pytest

from ..._lease_stores import LeaseStoreClient
from ..._replicas._leases import LeaseConflict, LeaseRecord, StoredLease
from ._base import since

__all__ = ["LeaseStoreConformance"]

GROUPS = ("members", "singletons")
RECREATIONS = 3
"""Delete-and-create rounds a test runs: a counter kept per lease restarts at the first."""


def _name(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:10]}"


def _record(holder: str, renewals: int = 0) -> LeaseRecord:
    return LeaseRecord(holder=holder, renewals=renewals, duration=15.0, view=(holder, "other"))


async def _read(store: LeaseStoreClient, group: str, name: str) -> StoredLease | None:
    """The lease as both reads give it: alone (``read_lease``) and in its group's list."""
    alone = await store.read_lease(group, name)
    found = [lease for lease in await store.list_leases(group) if lease.name == name]
    assert len(found) <= 1, f"{name!r} listed {len(found)} times"
    listed = found[0] if found else None
    assert alone == listed, f"{group}/{name} read alone {alone}, listed {listed}: reads disagree"
    return alone


class LeaseStoreConformance:
    """A lease store's rules: conditional writes, versions that never repeat, fresh reads."""

    @since("1.7")
    async def test_a_lease_is_created_once_and_read_back_whole(
        self, lease_stores: tuple[LeaseStoreClient, LeaseStoreClient]
    ) -> None:
        a, b = lease_stores
        name = _name("create")
        created = await a.write_lease("members", name, _record("a"), version=None)
        assert created.name == name
        assert created.record == _record("a")
        assert await _read(b, "members", name) == created
        assert await _read(b, "singletons", name) is None, "groups are apart"
        with pytest.raises(LeaseConflict):
            await b.write_lease("members", name, _record("b"), version=None)
        assert await _read(a, "members", name) == created

    @since("1.7")
    async def test_a_write_or_delete_at_an_old_version_changes_nothing(
        self, lease_stores: tuple[LeaseStoreClient, LeaseStoreClient]
    ) -> None:
        a, b = lease_stores
        name = _name("replace")
        first = await a.write_lease("singletons", name, _record("a"), version=None)
        second = await a.write_lease("singletons", name, _record("a", 1), version=first.version)
        assert second.version != first.version
        assert second.record.renewals == 1
        with pytest.raises(LeaseConflict):
            await b.write_lease("singletons", name, _record("b"), version=first.version)
        await b.delete_lease("singletons", name, version=first.version)
        assert await _read(b, "singletons", name) == second
        await b.delete_lease("singletons", name, version=second.version)
        assert await _read(a, "singletons", name) is None
        await a.delete_lease("singletons", name, version=second.version)  # gone: no error

    @since("1.7")
    async def test_of_two_writers_at_one_version_one_wins(
        self, lease_stores: tuple[LeaseStoreClient, LeaseStoreClient]
    ) -> None:
        a, b = lease_stores
        name = _name("race")
        start = await a.write_lease("singletons", name, _record("a"), version=None)
        won: list[StoredLease] = []
        lost: list[str] = []

        async def take(store: LeaseStoreClient, holder: str) -> None:
            try:
                won.append(
                    await store.write_lease(
                        "singletons", name, _record(holder), version=start.version
                    )
                )
            except LeaseConflict:
                lost.append(holder)

        async with anyio.create_task_group() as group:
            group.start_soon(take, a, "a")
            group.start_soon(take, b, "b")
        assert len(won) == 1, (won, lost)
        assert len(lost) == 1, (won, lost)
        assert await _read(b, "singletons", name) == won[0]

    @since("1.7")
    async def test_a_version_never_repeats_after_a_delete_and_a_re_create(
        self, lease_stores: tuple[LeaseStoreClient, LeaseStoreClient]
    ) -> None:
        a, b = lease_stores
        name = _name("again")
        seen: list[str] = []
        for round_ in range(RECREATIONS):
            created = await a.write_lease("members", name, _record("a", round_), version=None)
            renewed = await a.write_lease(
                "members", name, _record("a", round_ + 1), version=created.version
            )
            versions = [created.version, renewed.version]
            assert not set(versions) & set(seen), f"version repeated: {versions} after {seen}"
            for old in seen:  # a stale holder meets a conflict, never the re-created lease
                with pytest.raises(LeaseConflict):
                    await b.write_lease("members", name, _record("stale"), version=old)
                await b.delete_lease("members", name, version=old)
            assert await _read(b, "members", name) == renewed
            seen.extend(versions)
            await a.delete_lease("members", name, version=renewed.version)

    @since("1.7")
    async def test_every_read_sees_every_finished_write_of_another_client(
        self, lease_stores: tuple[LeaseStoreClient, LeaseStoreClient]
    ) -> None:
        a, b = lease_stores
        name = _name("fresh")
        assert await _read(b, "members", name) is None  # a copy b might keep is warm now
        created = await a.write_lease("members", name, _record("a"), version=None)
        assert await _read(b, "members", name) == created, "a read missed a finished create"
        renewed = await a.write_lease("members", name, _record("a", 1), version=created.version)
        assert await _read(b, "members", name) == renewed, "a read missed a finished replace"
        taken = await b.write_lease("members", name, _record("b", 2), version=renewed.version)
        assert await _read(a, "members", name) == taken, "a read missed the other's write"
        await b.delete_lease("members", name, version=taken.version)
        assert await _read(a, "members", name) is None, "a read missed a finished delete"
