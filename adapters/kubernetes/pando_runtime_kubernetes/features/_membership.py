"""Several host replicas on the cluster's own coordination engine: ``coordination.k8s.io`` Leases.

The core's :class:`~pando_runtime.Membership` does the work (renewals, expiry on the reader's
clock, rendezvous ownership, drained handovers, singletons); this module gives it a
:class:`~pando_runtime.plugin.LeaseStore` over Lease objects in the host's namespace
(``server_namespace``), and the adapter one :class:`~pando_runtime.plugin.MembershipSlot` that
guards every write, fenced at the API server by :class:`Fences` (``_fencing.py``).

Each replica holds ``Lease/pando-replica-<name>``; each singleton ``Lease/pando-singleton-<name>``.
Both carry the managed-by label and ``pando.dev/lease-group``; the renewal count, the exact
duration and (on a replica's Lease) the members it acts under are annotations, and the spec's
``holderIdentity``, ``leaseDurationSeconds`` and ``renewTime`` say the same to ``kubectl``.
Writes are the session's conditional writes on the ``resourceVersion`` read (its
``WriteConflict`` is the membership's :class:`LeaseConflict`); the API server is linearizable
over etcd, which the membership's guarantees need.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from pando_runtime import Membership, MembershipSettings
from pando_runtime.plugin import LeaseConflict, LeaseRecord, MembershipSlot, StoredLease

from .._info import KubernetesConfig
from .._log import logger
from .._names import (
    LABEL_BUNDLE,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    MANAGED_SELECTOR,
)
from ..api._paths import api_path
from ..cache._projections import NamespaceFacts, project_namespace
from ..session._errors import WriteConflict
from ..session._session import ClusterSession
from ._fencing import Fences

__all__ = ["KubeLeases", "KubeMembership", "SessionLeases", "kube_lease_store"]

_LOG = logger("membership")

GROUP = "coordination.k8s.io/v1"
LABEL_GROUP = "pando.dev/lease-group"
ANN_NAME = "pando.dev/lease-name"
ANN_RENEWALS = "pando.dev/renewals"
ANN_DURATION = "pando.dev/lease-duration"
ANN_VIEW = "pando.dev/members"
_PREFIX = {
    "members": "pando-replica-",
    "singletons": "pando-singleton-",
    "placements": "pando-placement-",  # a fleet's placement records, when this is its store
    "epochs": "pando-epoch-",  # a Docker adapter's epoch records, when this is its store
}


def lease_object(namespace: str, group: str, name: str, record: LeaseRecord) -> dict[str, Any]:
    """The Lease that holds ``record`` (without a ``resourceVersion``)."""
    annotations = {
        ANN_NAME: name,
        ANN_RENEWALS: str(record.renewals),
        ANN_DURATION: repr(record.duration),
    }
    if group == "members":
        annotations[ANN_VIEW] = ",".join(record.view)
    return {
        "apiVersion": GROUP,
        "kind": "Lease",
        "metadata": {
            "name": _PREFIX[group] + name,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_GROUP: group},
            "annotations": annotations,
        },
        "spec": {
            "holderIdentity": record.holder,
            "leaseDurationSeconds": max(1, math.ceil(record.duration)),
            "renewTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        },
    }


def stored_lease(obj: Mapping[str, Any]) -> StoredLease | None:
    """The lease a Lease object holds; ``None`` for one this module did not write."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    spec = obj.get("spec") or {}
    try:
        record = LeaseRecord(
            holder=str(spec.get("holderIdentity") or ""),
            renewals=int(annotations[ANN_RENEWALS]),
            duration=float(annotations[ANN_DURATION]),
            view=tuple(v for v in str(annotations.get(ANN_VIEW, "")).split(",") if v),
        )
        return StoredLease(
            name=str(annotations[ANN_NAME]), record=record, version=str(meta["resourceVersion"])
        )
    except (KeyError, ValueError):
        return None


class KubeLeases:
    """A :class:`~pando_runtime.plugin.LeaseStore` over Lease objects in one namespace."""

    def __init__(self, session: ClusterSession, namespace: str) -> None:
        self._session = session
        self._namespace = namespace

    def _path(self, group: str, name: str | None = None) -> str:
        return api_path(
            self._namespace,
            "leases",
            _PREFIX[group] + name if name else None,
            GROUP,
        )

    async def list_leases(self, group: str) -> tuple[StoredLease, ...]:
        async with self._session.connection.coordinating():
            answer = await self._session.api.get(
                self._path(group),
                f"list the {group} leases",
                labelSelector=f"{MANAGED_SELECTOR},{LABEL_GROUP}={group}",
            )
        leases = (stored_lease(item) for item in answer.get("items") or ())
        return tuple(lease for lease in leases if lease is not None)

    async def read_lease(self, group: str, name: str) -> StoredLease | None:
        async with self._session.connection.coordinating():
            found = await self._session.api.find(
                self._path(group, name), f"read the lease of {name!r}"
            )
        if found is None:
            return None
        labels = (found.get("metadata") or {}).get("labels") or {}
        if labels.get(LABEL_MANAGED_BY) != MANAGED_BY or labels.get(LABEL_GROUP) != group:
            return None  # a Lease of that name the list would not select (not written here)
        return stored_lease(found)

    async def write_lease(
        self, group: str, name: str, record: LeaseRecord, *, version: str | None
    ) -> StoredLease:
        body = lease_object(self._namespace, group, name, record)
        path = self._path(group) if version is None else self._path(group, name)
        try:
            async with self._session.connection.coordinating():
                answer = await self._session.writer.write_if(
                    f"write the lease of {name!r}", path, body, version=version
                )
        except WriteConflict as error:
            msg = f"lease {name!r} ({group}) changed since version {version}"
            raise LeaseConflict(msg, details={"lease": name, "group": group}) from error
        stored = stored_lease(answer)
        if stored is None:
            raise self._session.errors.down(f"the API server returned an unreadable lease {name!r}")
        return stored

    async def delete_lease(self, group: str, name: str, *, version: str) -> None:
        with contextlib.suppress(WriteConflict):  # changed: another replica holds it now
            async with self._session.connection.coordinating():
                await self._session.writer.delete(
                    self._namespace, "leases", _PREFIX[group] + name, GROUP, version=version
                )


class SessionLeases:
    """The Leases as a lease store loaded by name (``load_lease_store("kubernetes", ...)``).

    It takes the adapter's settings and opens a cluster session of its own; what it writes is
    what the adapter's membership writes, and the adapter keeps using its own store.
    """

    def __init__(self, config: KubernetesConfig) -> None:
        self._session = ClusterSession(config)
        self._leases = KubeLeases(self._session, config.server_namespace)

    async def list_leases(self, group: str) -> tuple[StoredLease, ...]:
        return await self._leases.list_leases(group)

    async def read_lease(self, group: str, name: str) -> StoredLease | None:
        return await self._leases.read_lease(group, name)

    async def write_lease(
        self, group: str, name: str, record: LeaseRecord, *, version: str | None
    ) -> StoredLease:
        return await self._leases.write_lease(group, name, record, version=version)

    async def delete_lease(self, group: str, name: str, *, version: str) -> None:
        await self._leases.delete_lease(group, name, version=version)

    async def aclose(self) -> None:
        """Close the session's connections (the Leases stay)."""
        await self._session.close()


def kube_lease_store(config: KubernetesConfig) -> SessionLeases:
    """The factory ``load_lease_store("kubernetes", ...)`` calls."""
    return SessionLeases(config)


class KubeMembership:
    """The adapter's membership: its slot (the write guard) and its Leases."""

    def __init__(
        self,
        session: ClusterSession,
        config: KubernetesConfig,
        slot: MembershipSlot | None = None,
    ) -> None:
        self._session = session
        self.leases = KubeLeases(session, config.server_namespace)
        self.slot = slot or MembershipSlot()
        """The write guard; shared by every member of a multi-cluster adapter (one membership)."""
        self.fences = Fences(session, self.slot)

    async def bundle_ids(self) -> list[str]:
        """The bundles this cluster holds: from the cache when it answers, else one list.

        A member's changes stream asks every round: from the cache it costs no call (a list
        of 1,000 apps' namespaces was 615 KiB a second per replica at rest).
        """
        informer = await self._session.cache.synced()
        if informer is not None:
            held: Iterable[NamespaceFacts] = informer.namespaces.by_name.values()
        else:
            answer = await self._session.api.get(
                api_path(None, "namespaces"),
                "list the apps' namespaces",
                labelSelector=f"{MANAGED_SELECTOR},{LABEL_BUNDLE}",
            )
            held = (project_namespace(item) for item in answer.get("items") or ())
        return [f.bundle_id for f in held if f.bundle_id and not f.volumes_only]

    @contextlib.asynccontextmanager
    async def join(
        self, replica: str, settings: MembershipSettings | None
    ) -> AsyncIterator[Membership]:
        """Join as ``replica`` (see :meth:`KubernetesAdapter.membership`).

        Meanwhile every request names the replica in its User-Agent, from the first lease
        read on, so the API server's audit log tells the replicas' writes apart.
        """
        _LOG.debug("replica %s joining", replica, extra={"replica": replica})
        api = await self._session.connection.transport()
        named = self.slot.current is None  # a second join is refused: the member keeps its name
        if named:
            api.identify(replica)
        try:
            async with self.slot.join(
                self.leases, replica, settings, bundles=self.bundle_ids
            ) as membership:
                yield membership
        finally:
            if named:
                api.identify(None)

    def guarding(self, bundle_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """Refuse a write of a bundle this replica does not own (:class:`NotOwner`).

        The block is a write in flight, which a handover waits for; within it a member's writes
        carry its stamp of the bundle (see :class:`Fences`).
        """
        return self.fences.guarding(bundle_id)
