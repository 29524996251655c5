"""Placement records: where a fleet's replicas first placed each app, in their lease store.

A fleet whose replicas share a membership (``lease_store``) writes, before a first placement,
a record of the app in the store's group ``placements``, created only if absent: the member,
the write epoch the placement is made under (:func:`~pando_runtime.plugin.write_epoch`: the
fleet places inside its write guard, which moved it) and the writer. A replica that finds a
record goes where it says instead of choosing: so two replicas placing one app at once (an
owner paused past its lease while the next owner places it) put it on one member. The record
is kept as a lease (``holder``: the writer, ``renewals``: the epoch, ``view``: the member) so
every store serves it unchanged; nothing expires it, and a destroy that removes the app's
volumes deletes it.
"""

from __future__ import annotations

from .._contract._errors import PandoRuntimeError
from .._lease_stores import LeaseStoreClient
from .._replicas._leases import LeaseConflict, LeaseRecord, StoredLease
from .._store_membership import StoreMembership
from .._util._log import logger
from .._write_epochs import write_epoch

__all__ = ["PLACEMENTS", "PlacementRecords"]

PLACEMENTS = "placements"
"""The store's group of the placement records, one per app by its bundle id."""

log = logger("fleet")


class PlacementRecords:
    """The placement records of a fleet's apps, while its membership is joined."""

    def __init__(self, replicas: StoreMembership) -> None:
        self._replicas = replicas
        self._versions: dict[str, str] = {}
        """The version of each record this process wrote or read (to delete it)."""

    async def claim(self, bundle_id: str, member: str, members: frozenset[str]) -> str:
        """The member ``bundle_id`` goes to: ``member`` once recorded, else the record's.

        Outside a membership nothing is recorded (one process places alone). A record naming
        a member no longer in the fleet (``members``) is replaced at its version.
        """
        store, membership = self._replicas.store, self._replicas.slot.current
        if store is None or membership is None:
            return member
        epoch = write_epoch(bundle_id)
        record = LeaseRecord(
            holder=membership.replica,
            renewals=epoch.epoch if epoch is not None else 0,
            duration=0.0,
            view=(member,),
        )
        version: str | None = None
        while True:
            try:
                stored = await store.write_lease(PLACEMENTS, bundle_id, record, version=version)
            except LeaseConflict:
                found = await self._read(store, bundle_id)
                if found is None:
                    version = None  # deleted meanwhile: create it
                    continue
                recorded = found.record.view[0] if found.record.view else ""
                if recorded in members:
                    if recorded != member:
                        log.info(
                            "bundle %s goes to %s, where %s placed it",
                            bundle_id,
                            recorded,
                            found.record.holder,
                            extra={"bundle_id": bundle_id, "member": recorded},
                        )
                    return recorded
                version = found.version  # its member left the fleet: this placement replaces it
                continue
            self._versions[bundle_id] = stored.version
            return member

    async def _read(self, store: LeaseStoreClient, bundle_id: str) -> StoredLease | None:
        found = await store.read_lease(PLACEMENTS, bundle_id)
        if found is not None:
            self._versions[bundle_id] = found.version
        return found

    async def forget(self, bundle_id: str) -> None:
        """Delete the record of ``bundle_id`` (destroyed with its volumes), if there is one.

        A store that fails it fails no destroy (the app is gone from its member): a record
        left behind only sends the app's next first deploy to the member it names.
        """
        store = self._replicas.store
        if store is None:
            return
        try:
            version = self._versions.pop(bundle_id, None)
            if version is None:
                found = await self._read(store, bundle_id)
                version = self._versions.pop(bundle_id, None) if found else None
            if version is not None:
                await store.delete_lease(PLACEMENTS, bundle_id, version=version)
        except PandoRuntimeError as error:
            log.warning(
                "the placement record of %s stays in the store: %s",
                bundle_id,
                error.message,
                extra={"bundle_id": bundle_id},
            )
