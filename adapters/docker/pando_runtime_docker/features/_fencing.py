"""Epochs on a member's containers: a stale write is repaired, since an engine cannot refuse it.

An engine has no conditional writes: a replica paused after its write guard and past its lease
still reaches the engine when it resumes. So each app's writers are numbered in the lease
store: on its first apply of a bundle in a tenure (``Membership.tenure``) a replica moves the
app's **epoch record** (group ``epochs``, named by the bundle id: ``renewals`` the epoch,
``holder`` the writer) to the next number by a conditional write, and every container it
creates for the app carries that number in the ``<prefix>.epoch`` label. When the epoch moves,
the replica notes the app's containers its view holds (confirmed by the engine after the move):
those it adopts, whatever epoch wrote them. A container of an older epoch that is not among
them was written after the move by a replica that no longer owned the app: its next apply
removes it and converges as usual (a stale write lives until the owner's next apply). A
container of a newer epoch means another replica moved it since: the apply is refused
(``NotOwner``), nothing written.

Records are never deleted (one small record per app ever applied), so an epoch never goes
back. A container without the label was written outside a membership and is never stale.
Cost: one conditional write per bundle gained, and when this process has not seen the record's
version yet (another replica wrote it since), a read of that one record and the write again;
counted in :attr:`Epochs.moves` and :attr:`Epochs.reads`. A host that never joins does neither.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime

import attrs

from pando_runtime import AdapterFailed, Membership, NotOwner
from pando_runtime.plugin import LeaseConflict, LeaseRecord, LeaseStoreClient, StoreMembership

from .._log import logger
from ..cache import ContainerCache, ContainerView

__all__ = ["EPOCHS", "Epochs", "Fence", "current_fence"]

_LOG = logger("fencing")

EPOCHS = "epochs"
"""The store's group of the epoch records, one per app by its bundle id."""

_ATTEMPTS = 3


@attrs.frozen(slots=True)
class Fence:
    """The epoch an apply writes under, and the containers adopted when it began."""

    epoch: int
    adopted: frozenset[str]

    def stale(self, containers: Iterable[ContainerView]) -> frozenset[str]:
        """Ids of ``containers`` written under an older epoch after this one began."""
        return frozenset(
            c.id
            for c in containers
            if c.epoch is not None and c.epoch < self.epoch and c.id not in self.adopted
        )


_FENCE: contextvars.ContextVar[Fence | None] = contextvars.ContextVar(
    "pando_docker_fence", default=None
)


def current_fence() -> Fence | None:
    """The fence of the apply running in this task (``None``: not a member's write)."""
    return _FENCE.get()


@attrs.frozen(slots=True, eq=False)
class _Held:
    membership: Membership
    tenure: int | None
    fence: Fence


class Epochs:
    """The epochs of the apps this replica writes as a member (see the module)."""

    def __init__(self, replicas: StoreMembership, cache: ContainerCache) -> None:
        self._replicas = replicas
        self._cache = cache
        self._held: dict[str, _Held] = {}
        self._versions: dict[str, tuple[int, str | None]] = {}
        """Each record's epoch and version (``None``: gone), as this process last wrote or read
        it."""
        self.moves = 0
        """Epoch records moved so far (one per bundle gained, on its first apply)."""
        self.reads = 0
        """Records read so far (one another replica had written since this process saw it)."""

    @contextlib.asynccontextmanager
    async def writing(self, bundle_id: str) -> AsyncIterator[None]:
        """The write guard; within it a member's apply writes under the bundle's epoch."""
        async with self._replicas.writing(bundle_id):
            membership, store = self._replicas.slot.current, self._replicas.store
            if membership is None or store is None:
                yield
                return
            fence = await self._fence(bundle_id, membership, store)
            reset = _FENCE.set(fence)
            try:
                yield
            finally:
                _FENCE.reset(reset)

    async def _fence(
        self, bundle_id: str, membership: Membership, store: LeaseStoreClient
    ) -> Fence:
        held = self._held.get(bundle_id)
        tenure = membership.tenure(bundle_id)  # None: written under an override
        if (
            held is not None
            and held.membership is membership
            and tenure is not None
            and held.tenure == tenure
        ):
            self._check_newest(bundle_id, held.fence.epoch, membership.replica)
            return held.fence
        self._held.pop(bundle_id, None)
        moved_at = datetime.now(UTC)
        epoch = await self._move(bundle_id, membership.replica, store)
        # Every container the engine made before the move is in the view: those are adopted.
        await self._cache.confirmed_since(moved_at)
        self._check_newest(bundle_id, epoch, membership.replica)
        adopted = frozenset(c.id for c in self._cache.bundle(bundle_id).containers)
        fence = Fence(epoch, adopted)
        self._held[bundle_id] = _Held(membership, tenure, fence)
        return fence

    def _check_newest(self, bundle_id: str, epoch: int, replica: str) -> None:
        newer = max(
            (c.epoch for c in self._cache.bundle(bundle_id).containers if c.epoch is not None),
            default=0,
        )
        if newer > epoch:
            self._held.pop(bundle_id, None)
            raise NotOwner(
                f"replica {replica!r} may not write bundle {bundle_id!r}: the engine holds "
                f"containers of epoch {newer}, newer than this replica's {epoch}",
                details={"replica": replica, "bundle_id": bundle_id, "epoch": newer},
            )

    async def _move(self, bundle_id: str, replica: str, store: LeaseStoreClient) -> int:
        """Write the app's next epoch, conditional on the version last seen (see the module)."""
        for _ in range(_ATTEMPTS):
            seen = self._versions.get(bundle_id)
            epoch = (seen[0] if seen else 0) + 1
            record = LeaseRecord(holder=replica, renewals=epoch, duration=0.0)
            try:
                stored = await store.write_lease(
                    EPOCHS, bundle_id, record, version=seen[1] if seen else None
                )
            except LeaseConflict:
                await self._read(bundle_id, store)
                continue
            self._versions[bundle_id] = (epoch, stored.version)
            self.moves += 1
            _LOG.info(
                "replica %s writes %s under epoch %d",
                replica,
                bundle_id,
                epoch,
                extra={"bundle_id": bundle_id, "replica": replica},
            )
            return epoch
        raise AdapterFailed(
            f"the epoch record of {bundle_id!r} kept changing: other replicas write it",
            remedy="Apply again; if it persists, check that each replica has a name of its own.",
            details={"bundle_id": bundle_id, "replica": replica},
        )

    async def _read(self, bundle_id: str, store: LeaseStoreClient) -> None:
        self.reads += 1
        lease = await store.read_lease(EPOCHS, bundle_id)
        if lease is None:  # removed by hand: created again, its epoch still past the last seen
            epoch = self._versions.get(bundle_id, (0, None))[0]
            self._versions[bundle_id] = (epoch, None)
        else:
            self._versions[bundle_id] = (lease.record.renewals, lease.version)
