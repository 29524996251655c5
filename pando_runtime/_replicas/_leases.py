"""Leases: what a membership stores in a runtime's coordination engine, and how it reads them.

An adapter that offers membership implements :class:`LeaseStore` over its runtime's
own coordination (Kubernetes: ``coordination.k8s.io`` Leases; the fake: a dict);
:class:`~pando_runtime.Membership` does the rest, the same for every adapter.

Expiry is judged as client-go judges it, on the reader's own monotonic clock and
never on a timestamp another host wrote: a lease is live until it has been seen
unchanged (same ``renewals``) for its ``duration``. Clock *offsets* between hosts
therefore do not matter; clock *rates* may differ by less than the margin between
``lease_duration`` and ``renew_deadline``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs

from .._contract._errors import AdapterFailed, AdapterUnavailable, PandoRuntimeError

__all__ = [
    "LeaseConflict",
    "LeaseRecord",
    "LeaseStore",
    "LeaseWatch",
    "StoredLease",
    "decode_lease_record",
    "encode_lease_record",
    "lease_failure",
]

MEMBERS = "members"
"""The group of the replicas' own leases."""
SINGLETONS = "singletons"
"""The group of the singletons' leases."""


@attrs.frozen(kw_only=True)
class LeaseRecord:
    """What one lease says: who holds it, how often it was renewed, for how long it holds.

    ``view`` is, in a replica's own lease, the members it acts under (what it published).
    """

    holder: str
    renewals: int
    duration: float
    view: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class StoredLease:
    """A lease as the store holds it: its name, its record and an opaque version."""

    name: str
    record: LeaseRecord
    version: str


class LeaseConflict(PandoRuntimeError):
    """A lease changed (or appeared) since the version a write was made against."""

    code = "LEASE_CONFLICT"
    default_remedy = "Read the lease again; another replica wrote it."


class LeaseStore(Protocol):
    """A runtime's coordination engine, as a membership uses it.

    Every store keeps three rules (``docs/replicas.md`` says how each store does;
    ``pando_runtime.testing.conformance.LeaseStoreConformance`` checks them):

    - **Reads see every finished write**: every call is linearizable (a read sees every
      write that ended before it began, whichever client made it); a store that can read
      from a replica or a cache reads from its leader or primary instead.
    - **Versions never repeat** for a ``(group, name)``, even after a delete and a
      re-create: a holder still writing at an old version must meet a conflict, never a
      re-created lease that happens to carry the same number.
    - **No expiry by the store** shorter than the lease's ``duration``: a lease is live
      until its readers have seen it unchanged for its duration (store-side TTLs, if any,
      are far longer).

    A store that cannot be reached raises :class:`AdapterUnavailable`; one whose runtime
    refused a call raises :class:`AdapterUnavailable` (a read) or :class:`AdapterFailed`
    (a write) whose message says what was refused and whose remedy fits (a missing
    namespace, a verb the identity may not use): the membership passes both on to the host.
    """

    async def list_leases(self, group: str) -> tuple[StoredLease, ...]:
        """Every lease of ``group`` (``members`` or ``singletons``)."""
        ...

    async def write_lease(
        self, group: str, name: str, record: LeaseRecord, *, version: str | None
    ) -> StoredLease:
        """Create the lease (``version=None``) or replace it if still at ``version``.

        Raises :class:`LeaseConflict` when it exists (creating) or changed (replacing).
        """
        ...

    async def delete_lease(self, group: str, name: str, *, version: str) -> None:
        """Delete the lease if still at ``version``; nothing when it is gone or changed."""
        ...


class LeaseWatch:
    """When each lease was last seen to change, on this process's monotonic clock."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._seen: dict[tuple[str, str], tuple[int, str, float]] = {}

    def see(self, group: str, lease: StoredLease) -> None:
        """Note ``lease`` as read now; a renewal (or a new holder) restarts its time."""
        key = (group, lease.name)
        mark = (lease.record.renewals, lease.record.holder)
        previous = self._seen.get(key)
        if previous is None or previous[:2] != mark:
            self._seen[key] = (*mark, self._clock())

    def forget(self, group: str, names: set[str]) -> None:
        """Drop what was seen of leases of ``group`` not in ``names`` (they are gone)."""
        for key in [k for k in self._seen if k[0] == group and k[1] not in names]:
            del self._seen[key]

    def live(self, group: str, lease: StoredLease) -> bool:
        """Whether ``lease`` changed within its duration, as this process saw it."""
        seen = self._seen.get((group, lease.name))
        if seen is None:
            return True  # never seen: it counts as renewed now
        return self._clock() - seen[2] <= lease.record.duration


def lease_failure(
    what: str, cause: BaseException | None, deadline: float, details: Mapping[str, Any]
) -> PandoRuntimeError:
    """The error for a lease call that failed: ``what`` could not be done, and why.

    A store's own error keeps its class, its words and its remedy (it knows what the
    runtime answered: a missing namespace, a refused verb), prefixed with ``what``; a
    conflict says another process wrote the lease; no answer within ``deadline`` seconds
    (``cause`` ``None`` or a timeout) is :class:`AdapterUnavailable` with its default remedy.
    """
    if isinstance(cause, LeaseConflict):
        return AdapterFailed(
            f"{what}: another process wrote the same lease meanwhile",
            remedy=(
                "Give each replica (and each singleton's holder) a name of its own; if a "
                "process of the same name ended, join again once its lease has expired."
            ),
            details={**cause.details, **details, "conflict": True},
        )
    if isinstance(cause, AdapterUnavailable | AdapterFailed):
        return type(cause)(
            f"{what}: {cause.message}", remedy=cause.remedy, details={**cause.details, **details}
        )
    if isinstance(cause, PandoRuntimeError):
        return cause  # a coded error of its own kind (throttled, say): as the store raised it
    return AdapterUnavailable(
        f"{what}: the runtime did not answer within the renew deadline ({deadline:g} s)",
        details=dict(details),
    )


def encode_lease_record(record: LeaseRecord) -> bytes:
    """``record`` as the JSON a key-value store keeps (see :func:`decode_lease_record`)."""
    body = {
        "holder": record.holder,
        "renewals": record.renewals,
        "duration": record.duration,
        "view": list(record.view),
    }
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def decode_lease_record(data: bytes | str) -> LeaseRecord | None:
    """The record :func:`encode_lease_record` wrote; ``None`` for anything else (not ours)."""
    try:
        body = json.loads(data)
        return LeaseRecord(
            holder=str(body["holder"]),
            renewals=int(body["renewals"]),
            duration=float(body["duration"]),
            view=tuple(str(v) for v in body.get("view") or ()),
        )
    except (ValueError, TypeError, KeyError):
        return None
