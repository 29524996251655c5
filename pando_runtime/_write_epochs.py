"""Epochs of a bundle's writers, numbered in the lease store: what a runtime fences by.

A runtime that cannot refuse a stale write (a Docker engine) can still label what each writer
makes and have the owner remove what an older writer left. The number is the app's **epoch**:
on a member's first write of a bundle in a tenure (``Membership.tenure``) its
:class:`WriteEpochs` moves the app's record (the store's group ``epochs``, named by the bundle
id: ``renewals`` the epoch, ``holder`` the writer) to the next number by a write conditional
on the version last seen, so of two replicas only one gets each number. The write in progress
publishes its epoch in a context variable, read with :func:`write_epoch`: an adapter's own
write guard sets it, and so does a fleet's around the member call, so a member that fences
labels its writes the same way whoever guards them (an adapter that does not read it is
unaffected).

Records are never deleted (one small record per app ever written as a member), so an epoch never
goes back. Cost: one conditional write per bundle gained, and when another replica wrote the
record since this process saw it, a read of that one record and the write again (counted in
:attr:`WriteEpochs.moves` and :attr:`WriteEpochs.reads`). A host that never joins does neither.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import attrs

from ._contract._errors import AdapterFailed, NotOwner
from ._lease_stores import LeaseStoreClient
from ._replicas._leases import LeaseConflict, LeaseRecord
from ._replicas._membership import Membership
from ._store_membership import StoreMembership
from ._util._log import logger

__all__ = ["EPOCHS", "WriteEpoch", "WriteEpochs", "write_epoch"]

log = logger("membership")

EPOCHS = "epochs"
"""The store's group of the epoch records, one per app by its bundle id."""

_ATTEMPTS = 3


@attrs.frozen(slots=True)
class WriteEpoch:
    """The epoch a member's write of a bundle is made under."""

    bundle_id: str
    epoch: int
    """The app's epoch: greater than every epoch an earlier writer of the app wrote under."""
    replica: str
    """The writer."""
    began: datetime
    """When the epoch was moved (UTC, taken before the move): what the runtime made before it
    was made under an older epoch, or outside any."""


_CURRENT: contextvars.ContextVar[WriteEpoch | None] = contextvars.ContextVar(
    "pando_write_epoch", default=None
)


def write_epoch(bundle_id: str) -> WriteEpoch | None:
    """The epoch the write of ``bundle_id`` running in this task is made under.

    ``None`` outside a member's write of that bundle: no membership, or a write guard that
    moves no epoch (``stop``, ``destroy``).
    """
    current = _CURRENT.get()
    return current if current is not None and current.bundle_id == bundle_id else None


@attrs.frozen(slots=True, eq=False)
class _Held:
    membership: Membership
    tenure: int
    epoch: WriteEpoch


class WriteEpochs:
    """The epochs of the bundles this replica writes as a member of ``replicas``."""

    def __init__(self, replicas: StoreMembership) -> None:
        self._replicas = replicas
        self._held: dict[str, _Held] = {}
        self._versions: dict[str, tuple[int, str | None]] = {}
        """Each record's epoch and version (``None``: gone), as this process last wrote or read
        it."""
        self.moves = 0
        """Epoch records moved so far (one per bundle gained, on its first write)."""
        self.reads = 0
        """Records read so far (one another replica had written since this process saw it)."""

    @contextlib.asynccontextmanager
    async def writing(self, bundle_id: str) -> AsyncIterator[WriteEpoch | None]:
        """The write guard (:meth:`StoreMembership.writing`), then the bundle's epoch.

        Within it :func:`write_epoch` answers the epoch (``None`` outside a membership: then the
        variable is left as it was, an enclosing fleet's). A write refused as
        :class:`NotOwner` from within (a runtime holding a newer epoch) drops the epoch: the
        next write moves it anew.
        """
        async with self._replicas.writing(bundle_id):
            membership, store = self._replicas.slot.current, self._replicas.store
            if membership is None or store is None:
                yield None
                return
            epoch = await self._epoch(bundle_id, membership, store)
            reset = _CURRENT.set(epoch)
            try:
                yield epoch
            except NotOwner:
                self._held.pop(bundle_id, None)
                raise
            finally:
                _CURRENT.reset(reset)

    async def _epoch(
        self, bundle_id: str, membership: Membership, store: LeaseStoreClient
    ) -> WriteEpoch:
        held = self._held.pop(bundle_id, None)
        tenure = membership.tenure(bundle_id)  # None: written under an override
        if held is not None and held.membership is membership and held.tenure == tenure:
            self._held[bundle_id] = held
            return held.epoch
        began = datetime.now(UTC)
        number = await self._move(bundle_id, membership.replica, store)
        epoch = WriteEpoch(bundle_id, number, membership.replica, began)
        if tenure is not None:
            self._held[bundle_id] = _Held(membership, tenure, epoch)
        return epoch

    async def _move(self, bundle_id: str, replica: str, store: LeaseStoreClient) -> int:
        """Write the app's next epoch, conditional on the version last seen."""
        for _ in range(_ATTEMPTS):
            seen = self._versions.get(bundle_id)
            number = (seen[0] if seen else 0) + 1
            record = LeaseRecord(holder=replica, renewals=number, duration=0.0)
            try:
                stored = await store.write_lease(
                    EPOCHS, bundle_id, record, version=seen[1] if seen else None
                )
            except LeaseConflict:
                await self._read(bundle_id, store)
                continue
            self._versions[bundle_id] = (number, stored.version)
            self.moves += 1
            log.info(
                "replica %s writes %s under epoch %d",
                replica,
                bundle_id,
                number,
                extra={"bundle_id": bundle_id, "replica": replica},
            )
            return number
        raise AdapterFailed(
            f"the epoch record of {bundle_id!r} kept changing: other replicas write it",
            remedy="Apply again; if it persists, check that each replica has a name of its own.",
            details={"bundle_id": bundle_id, "replica": replica},
        )

    async def _read(self, bundle_id: str, store: LeaseStoreClient) -> None:
        self.reads += 1
        lease = await store.read_lease(EPOCHS, bundle_id)
        if lease is None:  # removed by hand: created again, its epoch still past the last seen
            number = self._versions.get(bundle_id, (0, None))[0]
            self._versions[bundle_id] = (number, None)
        else:
            self._versions[bundle_id] = (lease.record.renewals, lease.version)
