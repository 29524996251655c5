"""Several host replicas on one fake runtime: leases in memory, links a test can cut.

A fake runtime (its world) holds one :class:`FakeLeaseStore`; each replica's adapter (the
fake itself is the first, ``fake.replica()`` makes more) reaches it through a
:class:`ReplicaLink` of its own and joins with ``membership(replica=...)``. A test kills a
replica (it stops renewing and releases nothing), cuts its link, and sees its bundles and
singletons move. Lease timings run on anyio's clock: give short :class:`MembershipSettings`
in tests.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Awaitable, Callable, Iterable

from .._contract._errors import AdapterUnavailable
from .._replicas._leases import LeaseConflict, LeaseRecord, LeaseStore, StoredLease
from .._replicas._membership import Membership
from .._replicas._settings import MembershipSettings
from .._replicas._slot import MembershipSlot

__all__ = ["FakeLeaseStore", "ReplicaLink"]


class FakeLeaseStore:
    """The fake runtime's coordination engine: leases in a dict, versions counted."""

    def __init__(self) -> None:
        self._leases: dict[tuple[str, str], StoredLease] = {}
        self._versions = itertools.count(1)
        self.writes = 0
        """How many lease writes (creations and renewals) were made."""

    def leases(self, group: str) -> dict[str, LeaseRecord]:
        """The records of ``group`` by name, for inspection."""
        return {name: lease.record for (g, name), lease in self._leases.items() if g == group}

    async def list_leases(self, group: str) -> tuple[StoredLease, ...]:
        return tuple(lease for (g, _), lease in sorted(self._leases.items()) if g == group)

    async def read_lease(self, group: str, name: str) -> StoredLease | None:
        return self._leases.get((group, name))

    async def write_lease(
        self, group: str, name: str, record: LeaseRecord, *, version: str | None
    ) -> StoredLease:
        current = self._leases.get((group, name))
        if (current.version if current else None) != version:
            msg = f"lease {group}/{name} is not at version {version}"
            raise LeaseConflict(msg, details={"lease": name})
        stored = StoredLease(name=name, record=record, version=str(next(self._versions)))
        self._leases[(group, name)] = stored
        self.writes += 1
        return stored

    async def delete_lease(self, group: str, name: str, *, version: str) -> None:
        current = self._leases.get((group, name))
        if current is not None and current.version == version:
            del self._leases[(group, name)]

    async def aclose(self) -> None:
        """Nothing to release (a ``LeaseStoreClient``, as loaded stores are: the kit runs on it)."""


class ReplicaLink:
    """One replica's path to the leases; a test cuts it to partition the replica."""

    def __init__(self, store: LeaseStore) -> None:
        self.store = store
        self.cut = False
        self.slot = MembershipSlot()

    def _check(self) -> None:
        if self.cut:
            msg = "the fake replica is cut off from the leases"
            raise AdapterUnavailable(msg)

    async def list_leases(self, group: str) -> tuple[StoredLease, ...]:
        self._check()
        return await self.store.list_leases(group)

    async def write_lease(
        self, group: str, name: str, record: LeaseRecord, *, version: str | None
    ) -> StoredLease:
        self._check()
        return await self.store.write_lease(group, name, record, version=version)

    async def delete_lease(self, group: str, name: str, *, version: str) -> None:
        self._check()
        await self.store.delete_lease(group, name, version=version)

    def join(
        self,
        replica: str,
        settings: MembershipSettings | None,
        *,
        bundles: Callable[[], Awaitable[Iterable[str]]],
    ) -> contextlib.AbstractAsyncContextManager[Membership]:
        """Join as ``replica`` over this link; ``bundles`` lists what the runtime holds."""
        return self.slot.join(self, replica, settings, bundles=bundles)

    def kill(self) -> None:
        """Crash the joined membership: no renewal, no release, no write."""
        if self.slot.current is None:
            msg = "this replica has not joined a membership"
            raise RuntimeError(msg)
        self.slot.current.crash()

    def check_write(self, bundle_id: str) -> None:
        """Refuse a write (:class:`NotOwner`) of a bundle this replica does not own."""
        self.slot.check_write(bundle_id)
