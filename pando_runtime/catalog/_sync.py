"""The catalog syncer: keeps a catalog backend equal to a desired set of registrations.

Lessons from users of earlier catalog syncers are built in:

- nothing is written, and nothing removed, before a source has handed over its first
  whole desired set: a restarting syncer never empties the catalog;
- every registration it writes carries its owner tag, and it never writes over, nor
  removes, a registration without that tag;
- a full pass every ``resync_interval`` seconds reads each node's registrations in one
  call per node (never one per service) and rewrites any owned registration that differs
  (an edit made behind its back is overwritten);
- a registration that leaves the desired set is removed at once when this syncer wrote
  it, and owned registrations it finds in the catalog that are not desired (left by an
  earlier run) are reaped every ``reap_interval`` seconds;
- a pass's writes go to a backend that batches (``BatchCatalogBackend``) in batches of its
  ``batch_limit``, and one call per write to any other; a write the catalog refuses is
  reported alone (``failed``, ``CatalogRefused``) and retried, the others land;
- a catalog that cannot be reached is retried with backoff and reported in
  :attr:`CatalogSyncer.status`; the desired set is kept meanwhile;
- :meth:`CatalogSyncer.cleanup` removes everything it owns, on request;
- given a ``writer`` (a replica's name), every write says who made it in the
  registration's metadata (``pando-writer``), and :meth:`CatalogSyncer.running` given a
  membership writes only while its replica holds the catalog singleton
  (``_singleton``).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import TYPE_CHECKING

import anyio
import attrs

from .._contract._errors import InvalidInput, PandoRuntimeError, Problem
from .._util._background import in_background
from .._util._frozen import frozen_mapping
from ._singleton import CATALOG_SINGLETON, sync_as_singleton
from ._types import CATALOG_NODE, CatalogBackend, CatalogRegistration, CatalogWrite
from ._writes import apply_writes

if TYPE_CHECKING:
    from .._replicas._membership import Membership

__all__ = [
    "CATALOG_OWNER_TAG",
    "CATALOG_WRITER_META",
    "CatalogSyncer",
    "SyncChange",
    "SyncChangeKind",
    "SyncStatus",
]

log = logging.getLogger("pando_runtime.catalog")
log.addHandler(logging.NullHandler())

CATALOG_OWNER_TAG = "pando-runtime"
"""The tag that marks a registration as the syncer's own."""

CATALOG_WRITER_META = "pando-writer"
"""The metadata key naming the syncer (the replica) that wrote a registration last.

Compared registrations leave it out: a new writer does not rewrite what is already right."""

Key = tuple[str, str]


class SyncChangeKind(enum.StrEnum):
    """What one change to the catalog was."""

    REGISTERED = "registered"
    UPDATED = "updated"
    DEREGISTERED = "deregistered"
    CONFLICT = "conflict"
    """A desired registration's key is taken by one the syncer does not own: left alone."""
    FAILED = "failed"


@attrs.frozen(kw_only=True)
class SyncChange:
    """One write to the catalog (or one refused), as told to ``on_change``."""

    kind: SyncChangeKind
    node: str
    service_id: str
    registration: CatalogRegistration | None = None
    error: str | None = None
    code: str | None = None
    """A failed change's error code: ``CATALOG_REFUSED`` when the catalog refused this one
    registration (the others were written), ``CATALOG_UNAVAILABLE`` when it could not be
    reached."""

    def __str__(self) -> str:
        where = f"{self.node}/{self.service_id}"
        if self.registration is not None and self.kind != SyncChangeKind.DEREGISTERED:
            r = self.registration
            where += f" ({r.service} at {r.address}:{r.port})"
        return f"{self.kind.value} {where}" + (f": {self.error}" if self.error else "")


@attrs.frozen(kw_only=True)
class SyncStatus:
    """How the syncer is doing: what it wants, what it believes is there, its last error."""

    desired: int
    """Registrations in the desired set."""
    owned: int
    """Owned registrations the syncer believes are in the catalog."""
    desired_known: bool
    """A source has handed over a first whole desired set (only then is anything written)."""
    healthy: bool
    """The last pass reached the catalog and wrote everything it meant to."""
    last_error: str | None
    full_syncs: int
    """Completed full passes (each read every node once)."""
    calls: Mapping[str, int] = attrs.field(converter=frozen_mapping)
    """Backend calls by method (``node_services``, and ``write_batch`` for a backend that
    writes in batches, else ``register`` and ``deregister``)."""
    conflicts: int = 0


def _check(registrations: Iterable[CatalogRegistration]) -> dict[Key, CatalogRegistration]:
    """The set keyed by ``(node, service_id)``; :class:`InvalidInput` lists every fault."""
    by_key: dict[Key, CatalogRegistration] = {}
    problems: list[Problem] = []
    for index, registration in enumerate(registrations):
        path = f"registrations[{index}]"
        if not isinstance(registration, CatalogRegistration):  # callers may be untyped
            problems.append(Problem(path, "not a CatalogRegistration", "wrong_type"))  # type: ignore[unreachable]
            continue
        problems.extend(
            Problem(f"{path}.{name}", "must not be empty", "required")
            for name in ("service", "service_id", "node")
            if not getattr(registration, name)
        )
        if not 0 < registration.port < 65536:  # noqa: PLR2004 - the port range
            problems.append(Problem(f"{path}.port", "must be 1 to 65535", "out_of_range"))
        if registration.key in by_key:
            problems.append(
                Problem(f"{path}.service_id", f"{registration.key} is listed twice", "duplicate")
            )
        by_key[registration.key] = registration
    if problems:
        raise InvalidInput("the desired registrations are not valid", problems)
    return by_key


class CatalogSyncer:
    """Keeps ``backend`` equal to the desired set handed to :meth:`sync` (a :class:`Syncer`).

    Run it with ``async with syncer.running():`` (or ``await syncer.run()`` in a task
    group); sources call :meth:`sync` whenever their whole set changes. ``nodes`` names
    the nodes read on every full pass besides those of the desired set (where an earlier
    run registered, say), so that their owned registrations are reaped even when nothing
    is desired there any more.
    """

    def __init__(
        self,
        backend: CatalogBackend,
        *,
        owner: str = CATALOG_OWNER_TAG,
        resync_interval: float = 5.0,
        reap_interval: float = 10.0,
        concurrency: int = 8,
        nodes: Iterable[str] = (CATALOG_NODE,),
        on_change: Callable[[SyncChange], None] | None = None,
        backoff_initial: float = 0.5,
        writer: str | None = None,
    ) -> None:
        if not owner:
            raise InvalidInput("the owner tag is empty", [Problem("owner", "must not be empty")])
        self.backend = backend
        self.owner = owner
        self.resync_interval = resync_interval
        self.reap_interval = reap_interval
        self.on_change = on_change
        self.writer = writer
        self._limiter = anyio.CapacityLimiter(max(1, concurrency))
        self._backoff_initial = backoff_initial
        self._extra_nodes = frozenset(nodes)
        self._desired: dict[Key, CatalogRegistration] = {}
        self._desired_known = anyio.Event()
        self._generation = 0
        self._applied = -1
        self._known: dict[Key, CatalogRegistration] = {}
        """Owned registrations as the syncer believes the catalog holds them."""
        self._foreign: set[Key] = set()
        self._written: set[Key] = set()
        """Keys this syncer wrote since it started (removed at once when undesired)."""
        self._calls: Counter[str] = Counter()
        self._healthy = False
        self._last_error: str | None = None
        self._full_syncs = 0
        self._reported_conflicts: set[Key] = set()
        self._wake = anyio.Event()
        self._progress = anyio.Event()
        self._full_requested = 0
        self._full_done = 0

    # -- what sources call --------------------------------------------------------------

    async def sync(self, registrations: Iterable[CatalogRegistration]) -> None:
        """Make ``registrations`` the whole desired set; written in the background.

        Raises :class:`InvalidInput` (and keeps the previous set) when an entry is not
        valid or a key is listed twice.
        """
        desired = _check(registrations)
        self._desired = {key: self._owned(r) for key, r in desired.items()}
        self._generation += 1
        self._desired_known.set()
        self._wake.set()

    def _owned(self, registration: CatalogRegistration) -> CatalogRegistration:
        if self.owner not in registration.tags:
            registration = attrs.evolve(registration, tags=(*registration.tags, self.owner))
        if self.writer is not None:
            metadata = {**registration.metadata, CATALOG_WRITER_META: self.writer}
            registration = attrs.evolve(registration, metadata=metadata)
        return registration

    # -- what hosts and tests read ------------------------------------------------------

    @property
    def status(self) -> SyncStatus:
        """A snapshot of how the syncer is doing."""
        return SyncStatus(
            desired=len(self._desired),
            owned=len(self._known),
            desired_known=self._desired_known.is_set(),
            healthy=self._healthy,
            last_error=self._last_error,
            full_syncs=self._full_syncs,
            calls=dict(self._calls),
            conflicts=len(self._reported_conflicts),
        )

    @property
    def calls(self) -> Counter[str]:
        """Backend calls so far, by method (a live counter)."""
        return self._calls

    async def wait_desired_known(self) -> None:
        """Wait until a source has handed over its first whole desired set."""
        await self._desired_known.wait()

    async def wait_applied(self) -> None:
        """Wait until the desired set as it is now has been written completely."""
        target = self._generation
        while self._applied < target:
            await self._progress.wait()

    async def wait_pass(self) -> None:
        """Wait until the pass under way (or the next one) has ended."""
        await self._progress.wait()

    async def wait_full_sync(self) -> None:
        """Ask for a full pass now and wait until one that started after this call is done."""
        target = self.request_full_sync()
        while self._full_done < target:
            await self._progress.wait()

    def request_full_sync(self) -> int:
        """Run a full pass now rather than at the next interval; the request's number."""
        self._full_requested += 1
        self._wake.set()
        return self._full_requested

    # -- running ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(
        self,
        membership: Membership | None = None,
        *,
        singleton: str = CATALOG_SINGLETON,
        on_hold: Callable[[bool], None] | None = None,
    ) -> AsyncIterator[CatalogSyncer]:
        """Run the sync loop for the duration of the block.

        Given a joined ``membership``, the loop runs only while its replica holds the
        singleton ``singleton``, starting each time with a full pass (see
        :func:`sync_as_singleton`, which also says what ``on_hold`` is told).
        """
        if membership is None:
            async with in_background(self.run):
                yield self
            return

        async def lead() -> None:
            await sync_as_singleton(self, membership, name=singleton, on_hold=on_hold)

        async with in_background(lead):
            yield self

    async def run(self) -> None:
        """The sync loop, until cancelled; writes nothing before the first desired set."""
        await self._desired_known.wait()
        clock = anyio.current_time
        last_full = last_reap = -math.inf
        failures = 0
        while True:
            now = clock()
            requested = self._full_requested
            full = requested > self._full_done or now >= last_full + self.resync_interval
            reap = full and now >= last_reap + self.reap_interval
            generation = self._generation
            self._wake = anyio.Event()
            ok = await self._pass(full=full, reap=reap)
            if ok:
                failures = 0
                self._healthy = True
                self._applied = generation
                if full:
                    self._full_done = requested
                    self._full_syncs += 1
                    last_full = now
                    if reap:
                        last_reap = now
            else:
                failures += 1
                self._healthy = False
            self._notify()
            if self._generation != generation or self._full_requested > self._full_done:
                continue
            if ok:
                wait = max(0.0, last_full + self.resync_interval - clock())
            else:  # retry what failed (a full pass stays due), no slower than a period
                backoff = self._backoff_initial * 2 ** min(failures - 1, 10)
                wait = min(backoff, max(self.resync_interval, self._backoff_initial))
            with anyio.move_on_after(wait):
                await self._wake.wait()

    def _notify(self) -> None:
        self._progress.set()
        self._progress = anyio.Event()

    async def _pass(self, *, full: bool, reap: bool) -> bool:
        """One pass: read the nodes when ``full``, then write what differs; True if clean."""
        if full:
            try:
                await self._read_nodes()
            except (PandoRuntimeError, OSError) as error:
                self._failed("reading the catalog", error)
                return False
        desired = self._desired
        writes: list[CatalogWrite] = []
        for key, registration in desired.items():
            if key in self._foreign:
                self._conflict(key, registration)
                continue
            known = self._known.get(key)
            if known is None or _unsigned(known) != _unsigned(registration):
                writes.append(CatalogWrite(registration))
        writes.extend(
            CatalogWrite(known, remove=True)
            for key, known in self._known.items()
            if key not in desired and (reap or key in self._written)
        )
        if not writes:
            return True
        outcome = {"ok": True}

        def done(write: CatalogWrite, error: BaseException | None) -> None:
            if error is not None:
                outcome["ok"] = False
            self._written_one(write, error)

        await apply_writes(
            self.backend, writes, limiter=self._limiter, calls=self._calls, on_done=done
        )
        return outcome["ok"]

    async def _read_nodes(self) -> None:
        nodes = (
            {node for node, _ in self._desired}
            | {node for node, _ in self._known}
            | self._extra_nodes
        )
        known: dict[Key, CatalogRegistration] = {}
        foreign: set[Key] = set()
        for node in sorted(nodes):
            self._calls["node_services"] += 1
            for registration in await self.backend.node_services(node):
                if self.owner in registration.tags:
                    known[registration.key] = registration
                else:
                    foreign.add(registration.key)
        self._known, self._foreign = known, foreign

    def _written_one(self, write: CatalogWrite, error: BaseException | None) -> None:
        """Take in one write's outcome: what the syncer believes, and ``on_change``."""
        node, service_id = key = write.key
        registration = None if write.remove else write.registration
        if error is not None:
            method = "deregister" if write.remove else "register"
            self._failed(f"{method} {node}/{service_id}", error)
            self._tell(
                SyncChange(
                    kind=SyncChangeKind.FAILED,
                    node=node,
                    service_id=service_id,
                    registration=registration,
                    error=_describe(error),
                    code=error.code if isinstance(error, PandoRuntimeError) else None,
                )
            )
            return
        if registration is None:
            self._known.pop(key, None)
            self._written.discard(key)
            kind = SyncChangeKind.DEREGISTERED
        else:
            kind = SyncChangeKind.UPDATED if key in self._known else SyncChangeKind.REGISTERED
            self._known[key] = registration
            self._written.add(key)
        self._tell(
            SyncChange(kind=kind, node=node, service_id=service_id, registration=registration)
        )

    def _conflict(self, key: Key, registration: CatalogRegistration) -> None:
        if key in self._reported_conflicts:
            return
        self._reported_conflicts.add(key)
        message = f"{key[0]}/{key[1]} is registered by someone else (no {self.owner!r} tag)"
        log.warning("catalog sync leaves %s alone: %s", key, message)
        self._tell(
            SyncChange(
                kind=SyncChangeKind.CONFLICT,
                node=key[0],
                service_id=key[1],
                registration=registration,
                error=message,
            )
        )

    def _failed(self, what: str, error: BaseException) -> None:
        self._last_error = f"{what}: {_describe(error)}"
        log.warning("catalog sync: %s failed, retrying: %s", what, _describe(error))

    def _tell(self, change: SyncChange) -> None:
        log.info("catalog %s", change)
        if self.on_change is not None:
            self.on_change(change)

    # -- cleanup ------------------------------------------------------------------------

    async def cleanup(self) -> int:
        """Remove every owned registration on the nodes the syncer knows; how many.

        Reads each node first, so registrations of an earlier run are removed too. The
        desired set is emptied (and counts as known): a running loop registers nothing.
        Raises :class:`~pando_runtime.catalog.CatalogUnavailable` when the catalog cannot be
        reached.
        """
        self._desired = {}
        self._generation += 1
        self._desired_known.set()
        await self._read_nodes()
        writes = [CatalogWrite(self._known[key], remove=True) for key in sorted(self._known)]
        errors: list[BaseException] = []

        def done(write: CatalogWrite, error: BaseException | None) -> None:
            if error is not None:
                errors.append(error)
            self._written_one(write, error)

        await apply_writes(
            self.backend, writes, limiter=self._limiter, calls=self._calls, on_done=done
        )
        if errors:  # what could not be removed is still owned: cleanup did not finish
            raise errors[0]
        self._written.clear()
        return len(writes)


def _unsigned(registration: CatalogRegistration) -> CatalogRegistration:
    """``registration`` without its writer: what two writers compare by."""
    if CATALOG_WRITER_META not in registration.metadata:
        return registration
    metadata = {k: v for k, v in registration.metadata.items() if k != CATALOG_WRITER_META}
    return attrs.evolve(registration, metadata=metadata)


def _describe(error: BaseException) -> str:
    if isinstance(error, PandoRuntimeError):
        return error.message
    return f"{type(error).__name__}: {error}"
