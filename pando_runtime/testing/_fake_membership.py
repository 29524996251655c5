"""Several host replicas on one fake runtime: leases in memory, replicas a test can kill.

``fake.replica()`` makes another :class:`FakeReplica` of the same fake runtime: the same
bundles, volumes and edges, a membership of its own. Each replica (the fake itself is
the first) joins with ``membership(replica=...)`` over one :class:`FakeLeaseStore`; a
test kills one with ``kill()`` (it stops renewing and releases nothing), cuts it off
from the leases with ``cut_off()``, and sees its bundles and singletons move. Lease
timings run on anyio's clock: give short :class:`MembershipSettings` in tests.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from contextvars import ContextVar
from datetime import datetime
from typing import TYPE_CHECKING

from anyio.abc import ByteReceiveStream

from .._adapter import RuntimeAdapter
from .._capabilities import RuntimeCapabilities
from .._errors import AdapterUnavailable
from .._leases import LeaseConflict, LeaseRecord, StoredLease
from .._member import Membership
from .._member_slot import MembershipSlot
from .._membership import MembershipSettings

if TYPE_CHECKING:
    from .._capacity import BundleUsage, Capacity, Fit, InUse
    from .._edge import EdgePlan, EdgeState
    from .._events import BundleEvent
    from .._exec import ExecRequest, ExecSession
    from .._logs import LogOptions
    from .._observed import ObservedBundle
    from .._plans import BundlePlan
    from .._refs import BundleHandle, BundleRef, DestroyOptions, Upstream, WorkloadRef
    from .._trial import TrialRequest, TrialResult
    from .._volumes import VolumeHandle, VolumeRequest
    from ._fake import FakeAdapter

__all__ = ["FakeLeaseStore", "FakeReplica", "ReplicaLink", "check_fake_write"]

_ACTING: ContextVar[MembershipSlot | None] = ContextVar("pando_fake_acting_replica", default=None)


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


class ReplicaLink:
    """One replica's path to the leases; a test cuts it to partition the replica."""

    def __init__(self, store: FakeLeaseStore) -> None:
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
        self, fake: FakeAdapter, replica: str, settings: MembershipSettings | None
    ) -> contextlib.AbstractAsyncContextManager[Membership]:
        async def bundles() -> list[str]:
            return fake.bundle_ids()

        return self.slot.join(self, replica, settings, bundles=bundles)

    def kill(self) -> None:
        """Crash the joined membership: no renewal, no release, no write."""
        if self.slot.current is None:
            msg = "this replica has not joined a membership"
            raise RuntimeError(msg)
        self.slot.current.crash()

    @contextlib.contextmanager
    def acting(self) -> Iterator[None]:
        token = _ACTING.set(self.slot)
        try:
            yield
        finally:
            _ACTING.reset(token)


def check_fake_write(own: ReplicaLink, bundle_id: str) -> None:
    """Refuse a write of the replica making it (:class:`NotOwner`) when it does not own it."""
    (_ACTING.get() or own.slot).check_write(bundle_id)


class FakeReplica(RuntimeAdapter):
    """Another host replica's adapter over the same fake runtime (``fake.replica()``).

    Everything but the membership is the fake's own: what one replica applies, every
    replica observes. ``kill()`` crashes its membership; ``cut_off()`` and
    ``reconnect()`` take its leases away and give them back.
    """

    kind = "fake"
    description = "Another replica's view of a fake runtime."

    def __init__(self, fake: FakeAdapter, link: ReplicaLink) -> None:
        # No super().__init__: the settings are the fake's, already taken.
        self.fake = fake
        self.config = fake.config
        self.link = link

    def kill(self) -> None:
        """Crash this replica's membership: it stops renewing and releases nothing."""
        self.link.kill()

    def cut_off(self) -> None:
        """Every lease call of this replica fails (``AdapterUnavailable``) until reconnected."""
        self.link.cut = True

    def reconnect(self) -> None:
        """Undo :meth:`cut_off`."""
        self.link.cut = False

    def membership(
        self, replica: str, settings: MembershipSettings | None = None
    ) -> contextlib.AbstractAsyncContextManager[Membership]:
        return self.fake.membership(replica, settings, link=self.link)

    # -- writes: the fake's, as this replica ----------------------------------------------

    async def apply(self, plan: BundlePlan) -> BundleHandle:
        with self.link.acting():
            return await self.fake.apply(plan)

    async def stop(self, ref: BundleRef) -> None:
        with self.link.acting():
            await self.fake.stop(ref)

    async def destroy(self, ref: BundleRef, options: DestroyOptions | None = None) -> None:
        with self.link.acting():
            await self.fake.destroy(ref, options)

    # -- everything else: the fake's own --------------------------------------------------

    async def health_check(self) -> None:
        await self.fake.health_check()

    async def capabilities(self) -> RuntimeCapabilities:
        return await self.fake.capabilities()

    async def observe(
        self, ref: BundleRef, *, not_before: datetime | None = None
    ) -> ObservedBundle:
        return await self.fake.observe(ref, not_before=not_before)

    def upstream(self, ref: WorkloadRef, port: int) -> Upstream:
        return self.fake.upstream(ref, port)

    async def capacity(self) -> Capacity:
        return await self.fake.capacity()

    async def largest_fit_for(self, bundle_id: str) -> Fit | None:
        return await self.fake.largest_fit_for(bundle_id)

    async def usage(self, ref: BundleRef) -> BundleUsage:
        return await self.fake.usage(ref)

    async def in_use(self) -> InUse:
        return await self.fake.in_use()

    def read_scope(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self.fake.read_scope()

    def watch_bundles(self) -> contextlib.AbstractAsyncContextManager[AsyncIterator[BundleEvent]]:
        return self.fake.watch_bundles()

    def logs(
        self, ref: WorkloadRef, options: LogOptions | None = None
    ) -> contextlib.AbstractAsyncContextManager[ByteReceiveStream]:
        return self.fake.logs(ref, options)

    def exec(
        self, ref: WorkloadRef, request: ExecRequest
    ) -> contextlib.AbstractAsyncContextManager[ExecSession]:
        return self.fake.exec(ref, request)

    async def create_volume(self, request: VolumeRequest) -> VolumeHandle:
        return await self.fake.create_volume(request)

    async def destroy_volume(self, handle: VolumeHandle) -> None:
        await self.fake.destroy_volume(handle)

    def snapshot_volume(
        self, handle: VolumeHandle
    ) -> contextlib.AbstractAsyncContextManager[ByteReceiveStream]:
        return self.fake.snapshot_volume(handle)

    async def restore_volume(
        self, handle: VolumeHandle, source: ByteReceiveStream | AsyncIterable[bytes]
    ) -> None:
        await self.fake.restore_volume(handle, source)

    async def has_image(self, reference: str) -> bool:
        return await self.fake.has_image(reference)

    async def import_image(self, source: ByteReceiveStream | AsyncIterable[bytes]) -> str:
        return await self.fake.import_image(source)

    async def trial(self, request: TrialRequest) -> TrialResult:
        return await self.fake.trial(request)

    async def apply_edge(self, plan: EdgePlan) -> None:
        await self.fake.apply_edge(plan)

    async def observe_edge(self, name: str) -> EdgeState:
        return await self.fake.observe_edge(name)

    async def remove_edge(self, name: str) -> None:
        await self.fake.remove_edge(name)

    async def edges(self) -> tuple[str, ...]:
        return await self.fake.edges()

    async def edge_volumes(self) -> tuple[VolumeHandle, ...]:
        return await self.fake.edge_volumes()
